// ONNX LayerNormalization (17), RMSNormalization (23) and RotaryEmbedding (23) mapped onto
// layers/transformer.hpp. LayerNormalization's optional Mean / InvStdDev outputs come from the same
// kernel (stats_output); when only one of them is wanted the other goes to a node-owned scratch buffer.
#include "layers/transformer.hpp"
#include "models/op_registry.hpp"

namespace cldl::graph {
namespace {

void need_f32(const InferCtx& c, size_t i) {
  if (c.input(i).dtype != DType::f32)
    c.error("unsupported: input '{}' is {}, only f32 is implemented", c.input(i).name, to_string(c.input(i).dtype));
}

bool wants(const Node& n, size_t o) { return o < n.outputs.size() && !n.outputs[o].empty(); }

LayerNormConfig norm_config(const Node& n, const Shape& x, bool has_bias) {
  LayerNormConfig c;
  c.rms = n.op_type == "RMSNormalization";
  c.input = x;
  c.axis = n.attr_i("axis", -1);
  c.epsilon = n.attr_f("epsilon", 1e-5f);
  c.bias = !c.rms && has_bias;
  c.stats_output = !c.rms && (wants(n, 1) || wants(n, 2));
  return c;
}

void infer_norm(InferCtx& c) {
  need_f32(c, 0);
  need_f32(c, 1);
  const bool rms = c.node.op_type == "RMSNormalization";
  if (c.node.attr_i("stash_type", 1) != 1)
    c.error("unsupported: stash_type {} (only 1 = float32 is implemented)", c.node.attr_i("stash_type", 1));
  if (rms && c.has_input(2)) c.error("RMSNormalization takes 2 inputs, got a third");
  if (c.has_input(2)) need_f32(c, 2);
  Shape x = c.shape(0);
  LayerNormConfig cfg = norm_config(c.node, x, c.has_input(2));
  Shape y;
  try {
    y = LayerNorm::validate(cfg);
  } catch (const Error& e) {
    c.error("{}", e.what());
  }
  // Scale and B: exactly the normalised dims' element count (broadcasting them is not implemented).
  for (size_t i = 1; i <= 2; ++i)
    if (c.has_input(i) && c.shape(i).numel() != cfg.cols())
      c.error("unsupported: input {} has shape {}, expected {} elements (the normalised axes of {}); broadcast "
              "scale/bias is not implemented", i, c.shape(i).str(), cfg.cols(), x.str());
  c.set(0, DType::f32, y);
  if (rms) return;
  int64_t axis = norm_axis(c, cfg.axis, int64_t(x.rank()));
  Shape stats = x;
  for (size_t d = size_t(axis); d < x.rank(); ++d) stats[d] = 1;
  for (size_t o = 1; o <= 2; ++o)
    if (wants(c.node, o)) c.set(o, DType::f32, stats);
}

class NormKernel : public NodeKernel {
 public:
  std::unique_ptr<LayerNorm> op;
  Tensor scratch;  // the unwanted one of Mean / InvStdDev
  bool stats = false;
  std::string algorithm() const override { return op->algorithm(); }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    std::vector<Tensor> ins{in[0], in[1]};
    if (in.size() > 2 && in[2].valid()) ins.push_back(in[2]);
    std::vector<Tensor> outs{out[0]};
    if (stats)
      for (size_t o = 1; o <= 2; ++o) outs.push_back(o < out.size() && out[o].valid() ? out[o] : scratch);
    op->enqueue(ins, outs, nullptr, ec);
  }
};

std::unique_ptr<NodeKernel> lower_norm(LowerCtx& c) {
  bool has_bias = c.in.size() > 2 && !c.in[2].name.empty();
  LayerNormConfig cfg = norm_config(c.node, c.in[0].shape.to_shape(), has_bias);
  auto k = std::make_unique<NormKernel>();
  k->op = LayerNorm::create(c.ctx, c.device, cfg);
  k->stats = cfg.stats_output;
  if (cfg.stats_output && !(wants(c.node, 1) && wants(c.node, 2)))
    k->scratch = c.ctx.alloc(Shape{cfg.rows()}, DType::f32, c.device);
  return k;
}

// RotaryEmbedding: X [B, S, H*D] (num_heads attribute) or [B, H, S, D]; cos/sin [B, S, R/2], or
// [max_pos, R/2] indexed by position_ids [B, S].
RotaryConfig rotary_config(const Node& n, const Shape& x, const Shape& cos, bool pos_ids) {
  RotaryConfig c;
  if (x.rank() != 3 && x.rank() != 4) invalid("RotaryEmbedding", "X must be 3-D or 4-D, got {}", x.str());
  if (pos_ids && cos.rank() == 0) invalid("RotaryEmbedding", "cos_cache must be 2-D with position_ids, got a scalar");
  c.batch = x[0];
  if (x.rank() == 3) {
    c.heads = n.attr_i("num_heads", 0);
    if (c.heads <= 0) invalid("RotaryEmbedding", "3-D input needs num_heads > 0, got {}", c.heads);
    if (x[2] % c.heads) invalid("RotaryEmbedding", "hidden size {} is not a multiple of num_heads {}", x[2], c.heads);
    c.seq = x[1], c.head_size = x[2] / c.heads, c.seq_first = true;
  } else if (x.rank() == 4) {
    c.heads = x[1], c.seq = x[2], c.head_size = x[3];
  } else {
    invalid("RotaryEmbedding", "X must be 3-D or 4-D, got {}", x.str());
  }
  c.rotary_dim = n.attr_i("rotary_embedding_dim", 0);
  c.interleaved = n.attr_i("interleaved", 0) != 0;
  c.position_ids = pos_ids;
  if (pos_ids) c.max_pos = cos[0];
  return c;
}

void infer_rotary(InferCtx& c) {
  need_f32(c, 0);
  need_f32(c, 1);
  need_f32(c, 2);
  if (c.has_input(3) && c.input(3).dtype != DType::i64)
    c.error("position_ids must be int64, got {}", to_string(c.input(3).dtype));
  RotaryConfig cfg;
  try {
    cfg = rotary_config(c.node, c.shape(0), c.shape(1), c.has_input(3));
    Rotary::validate(cfg);
  } catch (const Error& e) {
    c.error("{}", e.what());
  }
  Shape cs = c.shape(1);
  int64_t half = (cfg.rotary_dim ? cfg.rotary_dim : cfg.head_size) / 2;
  Shape want = cfg.position_ids ? Shape{cfg.max_pos, half} : Shape{cfg.batch, cfg.seq, half};
  if (cs.numel() != want.numel() || c.shape(2) != cs)
    c.error("cos/sin caches have shapes {} and {}, expected {}", cs.str(), c.shape(2).str(), want.str());
  c.set(0, DType::f32, c.shape(0));
}

class RotaryKernel : public NodeKernel {
 public:
  std::unique_ptr<Rotary> op;
  std::string algorithm() const override { return "rotary"; }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    std::vector<Tensor> ins{in[0], in[1], in[2]};
    if (in.size() > 3 && in[3].valid()) ins.push_back(in[3]);
    op->enqueue(ins, out.first(1), nullptr, ec);
  }
};

std::unique_ptr<NodeKernel> lower_rotary(LowerCtx& c) {
  bool pos = c.in.size() > 3 && !c.in[3].name.empty();
  auto k = std::make_unique<RotaryKernel>();
  k->op = Rotary::create(c.ctx, c.device,
                         rotary_config(c.node, c.in[0].shape.to_shape(), c.in[1].shape.to_shape(), pos));
  return k;
}

const OpRegistration kTransformerOps{
    {.type = "LayerNormalization", .since = 17, .family = "transformer", .infer = infer_norm, .lower = lower_norm},
    {.type = "RMSNormalization", .since = 23, .family = "transformer", .infer = infer_norm, .lower = lower_norm},
    {.type = "RotaryEmbedding", .since = 23, .family = "transformer", .infer = infer_rotary, .lower = lower_rotary},
};

}  // namespace
}  // namespace cldl::graph
