// ONNX RNN, LSTM and GRU mapped onto layers/rnn.hpp (one node = one RnnLayer). W, R, B and the LSTM
// peepholes P must be known at load (initializers or bound inputs): they are re-laid out once at
// create. X, sequence_lens, initial_h and initial_c are runtime inputs; Y, Y_h and Y_c are optional.
// Versions: opset 7 on (opset 14 added only the layout attribute, whose default is the earlier layout).
#include "layers/rnn.hpp"
#include "models/executor.hpp"
#include "models/op_registry.hpp"

namespace cldl::graph {
namespace {

// ONNX input positions (all three ops): X, W, R, B, sequence_lens, initial_h, initial_c (LSTM), P (LSTM).
constexpr size_t kX = 0, kW = 1, kR = 2, kB = 3, kLens = 4, kH0 = 5, kC0 = 6, kP = 7;

// The node's attributes in the form layers/rnn_onnx.cpp decodes, so the importer and the layer's own
// ONNX tests share one mapping.
OnnxNodeInfo node_info(const Node& n) {
  OnnxNodeInfo r;
  r.op_type = n.op_type;
  r.inputs = n.inputs;
  r.outputs = n.outputs;
  for (auto& [k, v] : n.attrs) {
    if (auto* i = std::get_if<int64_t>(&v)) r.ints[k] = *i;
    else if (auto* f = std::get_if<float>(&v)) r.floats[k] = *f;
    else if (auto* s = std::get_if<std::string>(&v)) r.strings[k] = *s;
    else if (auto* il = std::get_if<std::vector<int64_t>>(&v)) r.int_lists[k] = *il;
    else if (auto* fl = std::get_if<std::vector<float>>(&v)) r.float_lists[k] = *fl;
    else if (auto* sl = std::get_if<std::vector<std::string>>(&v)) r.string_lists[k] = *sl;
  }
  return r;
}

template <typename Ctx>
RnnWeights weights_of(const Ctx& c, const std::vector<const HostTensor*>& value, size_t n_in) {
  auto get = [&](size_t i) -> const HostTensor* { return i < n_in && i < value.size() ? value[i] : nullptr; };
  RnnWeights w;
  if (!get(kW) || !get(kR)) c.error("W and R must be known at load (initializers)");
  for (size_t i : {kW, kR, kB, kP})
    if (get(i) && get(i)->dtype() != DType::f32)
      c.error("unsupported: weight input {} is {}, only f32 is implemented", i, to_string(get(i)->dtype()));
  w.W = *get(kW);
  w.R = *get(kR);
  if (get(kB)) w.B = *get(kB);
  if (get(kP)) w.P = *get(kP);
  return w;
}

void infer_rnn(InferCtx& c) {
  if (c.input(kX).dtype != DType::f32)
    c.error("unsupported: X is {}, only f32 is implemented", to_string(c.input(kX).dtype));
  RnnConfig cfg;
  try {
    cfg = rnn_config_from_onnx(node_info(c.node), c.shape(kX));
  } catch (const Error& e) {
    c.error("{}", e.what());
  }
  for (size_t i : {kB, kP})
    if (c.has_input(i) && !c.value[i]) c.error("input {} must be known at load (initializer)", i);
  if (c.has_input(kLens) && c.input(kLens).dtype != DType::i32)
    c.error("sequence_lens must be int32, got {}", to_string(c.input(kLens).dtype));
  for (size_t i : {kH0, kC0})
    if (c.has_input(i) && c.input(i).dtype != DType::f32)
      c.error("unsupported: input {} is {}, only f32 is implemented", i, to_string(c.input(i).dtype));
  if (c.has_input(kC0) && cfg.cell != RnnCell::lstm) c.error("initial_c is an LSTM input");
  RnnWeights w = weights_of(c, c.value, c.in.size());
  std::vector<Shape> shapes;
  try {
    shapes = RnnLayer::validate(cfg, &w);
  } catch (const Error& e) {
    c.error("{}", e.what());
  }
  if (c.has_input(kLens) && c.value[kLens]) {  // known lengths: check them now
    try {
      RnnLayer::check_sequence_lens(cfg, c.value[kLens]->span<int32_t>());
    } catch (const Error& e) {
      c.error("{}", e.what());
    }
  }
  for (size_t o = 0; o < c.out.size() && o < 3; ++o)
    if (!c.node.outputs[o].empty()) c.set(o, DType::f32, shapes[o]);
}

class RnnKernel : public NodeKernel {
 public:
  std::unique_ptr<RnnLayer> op;
  std::string algorithm() const override { return op->algorithm(); }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    auto at = [](std::span<const Tensor> s, size_t i) { return i < s.size() ? s[i] : Tensor{}; };
    std::vector<Tensor> ins{at(in, kX), at(in, kLens), at(in, kH0)};
    if (op->config().cell == RnnCell::lstm) ins.push_back(at(in, kC0));
    std::vector<Tensor> outs{at(out, 0), at(out, 1)};
    if (op->config().cell == RnnCell::lstm) outs.push_back(at(out, 2));
    op->enqueue(ins, outs, nullptr, ec);  // scratch: the layer keeps its own, ordered by events
  }
};

std::unique_ptr<NodeKernel> lower_rnn(LowerCtx& c) {
  RnnConfig cfg = rnn_config_from_onnx(node_info(c.node), c.in[kX].shape.to_shape());
  auto k = std::make_unique<RnnKernel>();
  k->op = RnnLayer::create(c.ctx, c.device, cfg, weights_of(c, c.value, c.in.size()));
  if (c.options) k->op->set_strategy(parse_rnn_strategy(c.options->rnn_strategy));
  return k;
}

const OpRegistration kRnnOps{
    {.type = "RNN", .since = 7, .family = "rnn", .const_inputs = {kW, kR, kB}, .infer = infer_rnn, .lower = lower_rnn},
    {.type = "GRU", .since = 7, .family = "rnn", .const_inputs = {kW, kR, kB}, .infer = infer_rnn, .lower = lower_rnn},
    {.type = "LSTM", .since = 7, .family = "rnn", .const_inputs = {kW, kR, kB, kP}, .infer = infer_rnn, .lower = lower_rnn},
};

}  // namespace
}  // namespace cldl::graph
