// LSTM and GRU training ops (layers/rnn_backward.hpp), in cldl's own domain (kFusedDomain: never in a model
// file). make_rnn_weights_dynamic (models/autodiff.cpp) turns a training graph's LSTM / GRU nodes, whose weights
// are inputs, into LSTMTrain / GRUTrain, and the backward rule emits RNNGrad:
//   LSTMTrain(X, W, R, B?, sequence_lens (absent), initial_h?, initial_c?) -> Y?, Y_h?, Y_c?, S
//   GRUTrain(X, W, R, B?, sequence_lens (absent), initial_h?) -> Y?, Y_h?, S
//   RNNGrad(X, W, R, S, dY?, dY_h?, dY_c?) -> dX?, dW?, dR?, dB?, d initial_h?, d initial_c?   (attribute cell)
// Attributes as the ONNX LSTM / GRU (direction, hidden_size, layout, linear_before_reset; activations, clip and
// input_forget only at their defaults). S (the saved states) is [D, T * B, G + 2H], the forward's last output.
#include "layers/rnn_backward.hpp"
#include "models/ops_cnn_common.hpp"
#include "models/passes.hpp"

namespace cldl::graph {
namespace {

bool is_lstm(const Node& n) { return n.op_type == "LSTMTrain" || n.attr_s("cell", "") == "LSTM"; }

// The configuration of a training LSTM / GRU node from its attributes and X's and R's shapes.
RnnTrainConfig train_config(const Node& n, const Shape& x, const Shape& r) {
  RnnTrainConfig c;
  c.lstm = is_lstm(n);
  const std::string dir = n.attr_s("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    fail("{}: direction '{}', expected forward, reverse or bidirectional", n.describe(), dir);
  c.dirs = dir == "bidirectional" ? 2 : 1;
  c.reverse = dir == "reverse";
  c.layout = int(n.attr_i("layout", 0));
  c.linear_before_reset = n.attr_i("linear_before_reset", 0) != 0;
  if (x.rank() != 3) fail("{}: X has shape {}, expected rank 3", n.describe(), x.str());
  if (r.rank() != 3 || r[0] != c.dirs) fail("{}: R has shape {}, expected [{}, gates * H, H]", n.describe(), r.str(), c.dirs);
  c.hidden_size = r[2];
  if (n.has("hidden_size") && n.attr_i("hidden_size", 0) != c.hidden_size)
    fail("{}: hidden_size {} does not match R's shape {}", n.describe(), n.attr_i("hidden_size", 0), r.str());
  c.seq_length = c.layout ? x[1] : x[0];
  c.batch = c.layout ? x[0] : x[1];
  c.input_size = x[2];
  if (n.has("clip")) fail("{}: clip is not implemented for training", n.describe());
  if (n.attr_i("input_forget", 0) != 0) fail("{}: input_forget is not implemented for training", n.describe());
  if (n.has("activations")) {
    const auto* acts = std::get_if<std::vector<std::string>>(&n.attrs.at("activations"));
    std::vector<std::string> want;
    for (int d = 0; d < c.dirs; ++d)
      for (const char* a : c.lstm ? std::vector<const char*>{"Sigmoid", "Tanh", "Tanh"} : std::vector<const char*>{"Sigmoid", "Tanh"})
        want.push_back(a);
    if (!acts || *acts != want)
      fail("{}: only the default activations (sigmoid and tanh) are implemented for training", n.describe());
  }
  return c;
}

void check_f32(InferCtx& c) {
  for (size_t i = 0; i < c.in.size(); ++i)
    if (c.has_input(i) && c.input(i).dtype != DType::f32 && !(c.node.op_type != "RNNGrad" && i == 4))
      c.error("input '{}' is {}, only f32 is implemented", c.input(i).name, to_string(c.input(i).dtype));
}

void expect(InferCtx& c, size_t i, const char* what, const Shape& s) {
  if (c.has_input(i) && c.shape(i) != s) c.error("input '{}' ({}) has shape {}, expected {}", c.input(i).name, what, c.shape(i).str(), s.str());
}

void infer_train(InferCtx& c) {
  check_f32(c);
  const auto k = checked(c, [&] { return train_config(c.node, c.shape(0), c.shape(2)); });
  checked(c, [&] {
    RnnTrainForward::validate(k);
    return 0;
  });
  expect(c, 1, "W", k.w());
  expect(c, 3, "B", k.b());
  if (c.has_input(4))
    c.error("sequence_lens is not implemented for training (only full sequences; give no sequence_lens)");
  expect(c, 5, "initial_h", k.state());
  expect(c, 6, "initial_c", k.state());
  if (c.has_input(7)) c.error("peepholes (input P) are not implemented for training");
  const size_t states = k.lstm ? 3 : 2;
  if (c.out.size() != states + 1) c.error("{} outputs, expected {} (the last: the saved states)", c.out.size(), states + 1);
  if (!c.node.outputs[0].empty()) c.set(0, DType::f32, k.y());
  for (size_t o = 1; o < states; ++o)
    if (!c.node.outputs[o].empty()) c.set(o, DType::f32, k.state());
  c.set(states, DType::f32, k.saved());
}

std::unique_ptr<NodeKernel> lower_train(LowerCtx& c) {
  auto k = train_config(c.node, c.in[0].shape.to_shape(), c.in[2].shape.to_shape());
  k.bias = c.in.size() > 3 && !c.in[3].name.empty();
  return wrap(RnnTrainForward::create(c.ctx, c.device, k), c, {0, 1, 2, 3, 5, 6});
}

void infer_grad(InferCtx& c) {
  check_f32(c);
  const auto k = checked(c, [&] { return train_config(c.node, c.shape(0), c.shape(2)); });
  checked(c, [&] {
    RnnBackward::validate(k);
    return 0;
  });
  expect(c, 1, "W", k.w());
  expect(c, 3, "S", k.saved());
  expect(c, 4, "dY", k.y());
  expect(c, 5, "dY_h", k.state());
  expect(c, 6, "dY_c", k.state());
  const Shape shapes[] = {k.x(), k.w(), k.r(), k.b(), k.state(), k.state()};
  for (size_t o = 0; o < c.out.size() && o < 6; ++o)
    if (!c.node.outputs[o].empty()) c.set(o, DType::f32, shapes[o]);
}

std::unique_ptr<NodeKernel> lower_grad(LowerCtx& c) {
  auto k = train_config(c.node, c.in[0].shape.to_shape(), c.in[2].shape.to_shape());
  return wrap(RnnBackward::create(c.ctx, c.device, k), c);
}

const OpRegistration kRnnBackwardOps{
    {.type = "LSTMTrain", .domain = kFusedDomain, .since = 1, .family = "training", .infer = infer_train, .lower = lower_train},
    {.type = "GRUTrain", .domain = kFusedDomain, .since = 1, .family = "training", .infer = infer_train, .lower = lower_train},
    {.type = "RNNGrad", .domain = kFusedDomain, .since = 1, .family = "training", .infer = infer_grad, .lower = lower_grad},
};

}  // namespace
}  // namespace cldl::graph
