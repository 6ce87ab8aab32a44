// Squeeze-excitation fusion (typed pass "squeeze-excitation"): the channel gate as torchvision exports
// it (MobileNetV3: HardSigmoid; EfficientNet, RegNetY: Sigmoid; SiLU or ReLU inside),
//   p = GlobalAveragePool(x) (or ReduceMean over the spatial axes, keepdims)
//   h = Conv 1x1 (p, W1, b1) with a fused activation       [N, CR, 1, 1]
//   s = Conv 1x1 (h, W2, b2) with a fused Sigmoid / HardSigmoid
//   y = Mul(x, s)
// becomes one SqueezeExcite node (layers/se.hpp): one command per block where a plain run takes four
// (pool, two GEMMs, the Mul), a 4-command block cost ~70 us of launches on PoCL. It runs after the
// structure passes, so the activations are the convolutions' epilogues by then (activation fusion).
#include <set>

#include "layers/se.hpp"
#include "models/op_registry.hpp"
#include "models/ops_cnn_common.hpp"
#include "models/passes.hpp"

namespace cldl::graph {
namespace {

std::optional<Shape> static_f32(const Graph& g, const std::string& v) {
  auto it = g.values.find(v);
  if (it == g.values.end() || it->second.dtype != DType::f32 || !it->second.shape.is_static()) return std::nullopt;
  return it->second.shape.to_shape();
}

// A Conv with constant weights [out, in, 1, ...] that is a plain 1x1 convolution (group 1, unit strides and
// dilations, no padding) with a constant bias or none.
bool is_pointwise(const Graph& g, const Node& n, int64_t out, int64_t in) {
  if (n.op_type != "Conv" || !n.domain.empty() || n.outputs.size() != 1 || n.input_count() < 2) return false;
  auto w = g.initializers.find(n.input(1));
  if (w == g.initializers.end() || w->second.dtype() != DType::f32) return false;
  const Shape& ws = w->second.shape();
  if (ws.rank() < 3 || ws[0] != out || ws[1] != in || ws.numel() != out * in) return false;
  if (n.attr_i("group", 1) != 1 || n.attr_s("auto_pad", "NOTSET") != "NOTSET") return false;
  for (auto k : n.attr_ints("kernel_shape"))
    if (k != 1) return false;
  for (auto s : n.attr_ints("strides"))
    if (s != 1) return false;
  for (auto d : n.attr_ints("dilations"))
    if (d != 1) return false;
  for (auto p : n.attr_ints("pads"))
    if (p != 0) return false;
  if (n.input_count() > 2) {
    auto b = g.initializers.find(n.input(2));
    if (b == g.initializers.end() || b->second.dtype() != DType::f32 || b->second.numel() != out) return false;
  }
  for (auto& [k, v] : n.attrs)  // an epilogue this pass does not know (bias inputs, residuals): leave it
    if (k.starts_with("_cldl_") && k != "_cldl_act" && k != "_cldl_act_alpha" && k != "_cldl_act_beta") return false;
  return true;
}

// The pooled input of the block: GlobalAveragePool(x), or ReduceMean over every spatial axis with keepdims.
bool is_channel_mean(const Node& n, size_t rank) {
  if (!n.domain.empty() || n.outputs.size() != 1 || n.input_count() != 1) return false;
  if (n.op_type == "GlobalAveragePool") return true;
  if (n.op_type != "ReduceMean" || n.attr_i("keepdims", 1) != 1) return false;
  std::set<int64_t> axes;
  for (int64_t a : n.attr_ints("axes")) axes.insert(a < 0 ? a + int64_t(rank) : a);
  if (axes.size() != rank - 2) return false;
  for (size_t a = 2; a < rank; ++a)
    if (!axes.count(int64_t(a))) return false;
  return true;
}

size_t fuse_squeeze_excitation(Graph& g) {
  if (!has_op(g, {"GlobalAveragePool", "ReduceMean"}) || !has_op(g, {"Mul"})) return 0;
  size_t count = 0;
  auto rd = value_readers(g);
  auto pr = g.producers();
  std::set<size_t> drop;
  auto only_reader = [&](const std::string& v) { return rd[v].size() == 1 && rd[v][0] >= 0; };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& mul = g.nodes[i];
    if (mul.op_type != "Mul" || !mul.domain.empty() || mul.input_count() != 2 || mul.outputs.size() != 1) continue;
    for (int side = 0; side < 2; ++side) {
      const std::string x = mul.input(size_t(side)), s = mul.input(size_t(1 - side));
      auto xs = static_f32(g, x), ss = static_f32(g, s), ys = static_f32(g, mul.outputs[0]);
      if (!xs || !ss || !ys || x == s || xs->rank() < 3 || *ys != *xs) continue;
      const int64_t N = (*xs)[0], C = (*xs)[1];
      auto p2 = pr.find(s);
      if (p2 == pr.end() || !only_reader(s) || drop.count(p2->second)) continue;
      const Node& fc2 = g.nodes[p2->second];
      const Activation gate = fused_activation(fc2);
      if (gate.kind != Act::sigmoid && gate.kind != Act::hard_sigmoid) continue;
      auto hs = static_f32(g, fc2.input(0));
      if (!hs || hs->rank() != xs->rank() || (*hs)[0] != N || hs->numel() != N * (*hs)[1]) continue;
      const int64_t CR = (*hs)[1];
      if (!is_pointwise(g, fc2, C, CR) || C + CR > SqueezeExcite::kMaxLocalFloats) continue;
      auto p1 = pr.find(fc2.input(0));
      if (p1 == pr.end() || !only_reader(fc2.input(0))) continue;
      const Node& fc1 = g.nodes[p1->second];
      if (!is_pointwise(g, fc1, CR, C)) continue;
      auto p0 = pr.find(fc1.input(0));
      if (p0 == pr.end() || !only_reader(fc1.input(0))) continue;
      const Node& pool = g.nodes[p0->second];
      if (!is_channel_mean(pool, xs->rank()) || pool.input(0) != x) continue;
      // A bias the model left out is zeros: the kernel reads both.
      auto bias = [&](const Node& conv, int64_t n) {
        if (conv.input_count() > 2) return conv.input(2);
        const std::string b = g.unique_name(conv.name + "_zero_bias");
        g.initializers[b] = HostTensor::from<float>(Shape{n}, std::vector<float>(size_t(n), 0.0f));
        g.values[b] = ValueInfo{b, DType::f32, ValueShape(Shape{n})};
        return b;
      };
      const Activation hidden = fused_activation(fc1);
      Node se;
      se.name = mul.name.empty() ? g.unique_name("squeeze_excite") : mul.name + "/se";
      se.op_type = "SqueezeExcite";
      se.domain = kFusedDomain;
      se.inputs = {x, fc1.input(1), bias(fc1, CR), fc2.input(1), bias(fc2, C)};
      se.outputs = {mul.outputs[0]};
      se.attrs["act1"] = int64_t(hidden.kind);
      se.attrs["act1_alpha"] = hidden.alpha;
      se.attrs["act1_beta"] = hidden.beta;
      se.attrs["act2"] = int64_t(gate.kind);
      se.attrs["act2_alpha"] = gate.alpha;
      se.attrs["act2_beta"] = gate.beta;
      se.attrs["members"] = std::vector<std::string>{pool.name, fc1.name, fc2.name, mul.name};
      drop.insert(p0->second);
      drop.insert(p1->second);
      drop.insert(p2->second);
      mul = std::move(se);  // in the Mul's place: its readers come after it already
      ++count;
      break;
    }
  }
  erase_nodes(g, drop);
  return count;
}

Activation act_attr(const Node& n, const char* k) {
  const std::string a(k);
  const int64_t kind = n.attr_i(a, 0);
  if (kind < 0 || kind > int64_t(Act::celu)) fail("{}: attribute {} = {} is not an activation", n.describe(), a, kind);
  return Activation(Act(kind), n.attr_f(a + "_alpha", 0), n.attr_f(a + "_beta", 0));
}

SqueezeExciteConfig se_config(const Node& n, const Shape& x, const Shape& w1, const Shape& b1, const Shape& w2,
                              const Shape& b2) {
  SqueezeExciteConfig cfg;
  cfg.input = x;
  cfg.hidden = w1.rank() ? w1[0] : 0;
  cfg.act1 = act_attr(n, "act1");
  cfg.act2 = act_attr(n, "act2");
  const int64_t C = x.rank() > 1 ? x[1] : 0, CR = cfg.hidden;
  if (w1.rank() < 2 || w1.numel() != CR * C || w1[1] != C)
    fail("{}: input W1 has shape {}, expected [{}, {}, 1...]", n.describe(), w1.str(), CR, C);
  if (w2.rank() < 2 || w2.numel() != C * CR || w2[0] != C || w2[1] != CR)
    fail("{}: input W2 has shape {}, expected [{}, {}, 1...]", n.describe(), w2.str(), C, CR);
  if (b1.numel() != CR) fail("{}: input B1 has shape {}, expected [{}]", n.describe(), b1.str(), CR);
  if (b2.numel() != C) fail("{}: input B2 has shape {}, expected [{}]", n.describe(), b2.str(), C);
  return cfg;
}

void infer_se(InferCtx& c) {
  if (c.in.size() != 5) c.error("expects 5 inputs (X, W1, B1, W2, B2), got {}", c.in.size());
  for (size_t i = 0; i < 5; ++i)
    if (!c.has_input(i) || c.input(i).dtype != DType::f32) c.error("input {} must be f32", i);
  SqueezeExciteConfig cfg = se_config(c.node, c.shape(0), c.shape(1), c.shape(2), c.shape(3), c.shape(4));
  checked(c, [&] { SqueezeExcite::validate(cfg); });
  c.set(0, DType::f32, cfg.input);
}

std::unique_ptr<NodeKernel> lower_se(LowerCtx& c) {
  SqueezeExciteConfig cfg = se_config(c.node, c.in[0].shape.to_shape(), c.in[1].shape.to_shape(),
                                      c.in[2].shape.to_shape(), c.in[3].shape.to_shape(), c.in[4].shape.to_shape());
  std::string members;
  if (auto it = c.node.attrs.find("members");
      it != c.node.attrs.end() && std::holds_alternative<std::vector<std::string>>(it->second))
    for (auto& m : std::get<std::vector<std::string>>(it->second)) members += (members.empty() ? "" : ", ") + m;
  return wrap(SqueezeExcite::create(c.ctx, c.device, cfg), c, {},
              fmt::format("{} / {}, fuses {}", to_string(cfg.act1.kind), to_string(cfg.act2.kind), members));
}

const bool kRegistered =
    (register_fusion_pass("squeeze-excitation", fuse_squeeze_excitation, FusionStage::typed), true);
const OpRegistration kOps{{.type = "SqueezeExcite",
                           .domain = kFusedDomain,
                           .since = 1,
                           .family = "cnn",
                           .infer = infer_se,
                           .lower = lower_se}};

}  // namespace
}  // namespace cldl::graph
