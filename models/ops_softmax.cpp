// ONNX Softmax / LogSoftmax mapped onto layers/softmax.hpp: from opset 13 along one axis (default -1);
// opsets 1 to 12 coerce the input to 2-D at axis (default 1) and run along the rows of that view.
#include "layers/softmax.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

SoftmaxConfig softmax_config(const Node& n, int64_t opset, const Shape& s) {
  if (opset < 13) return SoftmaxConfig{coerced_2d(n, s), 1, n.op_type == "LogSoftmax"};
  return SoftmaxConfig{s, n.attr_i("axis", -1), n.op_type == "LogSoftmax"};
}

void infer_softmax(InferCtx& c) {
  if (c.input(0).dtype != DType::f32)
    c.error("unsupported: input '{}' is {}, only f32 is implemented", c.input(0).name, to_string(c.input(0).dtype));
  auto cfg = checked(c, [&] { return softmax_config(c.node, c.opset, c.shape(0)); });
  checked(c, [&] { return Softmax::validate(cfg); });
  c.set(0, DType::f32, c.shape(0));
}

std::unique_ptr<NodeKernel> lower_softmax(LowerCtx& c) {
  Shape s = c.in[0].shape.to_shape();
  auto cfg = softmax_config(c.node, c.node.opset, s);
  auto k = wrap(Softmax::create(c.ctx, c.device, cfg), c);
  if (cfg.input == s) return k;
  return std::make_unique<ReshapedKernel>(std::move(k), std::vector<std::optional<Shape>>{cfg.input},
                                          std::vector<std::optional<Shape>>{cfg.input},
                                          "on the 2-D view " + cfg.input.str() + " (opset < 13)");
}

const OpRegistration kSoftmaxOps{
    {.type = "Softmax", .since = 1, .family = "softmax", .infer = infer_softmax, .lower = lower_softmax},
    {.type = "LogSoftmax", .since = 1, .family = "softmax", .infer = infer_softmax, .lower = lower_softmax},
};

}  // namespace
}  // namespace cldl::graph
