// ONNX Softmax / LogSoftmax (opset 13 semantics: one axis, default -1) mapped onto layers/softmax.hpp.
#include "layers/softmax.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

SoftmaxConfig softmax_config(const Node& n, Shape s) {
  return SoftmaxConfig{std::move(s), n.attr_i("axis", -1), n.op_type == "LogSoftmax"};
}

void infer_softmax(InferCtx& c) {
  if (c.input(0).dtype != DType::f32)
    c.error("unsupported: input '{}' is {}, only f32 is implemented", c.input(0).name, to_string(c.input(0).dtype));
  auto cfg = softmax_config(c.node, c.shape(0));
  c.set(0, DType::f32, checked(c, [&] { return Softmax::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_softmax(LowerCtx& c) {
  return wrap(Softmax::create(c.ctx, c.device, softmax_config(c.node, c.in[0].shape.to_shape())), c);
}

const OpRegistration kSoftmaxOps{
    {.type = "Softmax", .since = 13, .family = "softmax", .infer = infer_softmax, .lower = lower_softmax},
    {.type = "LogSoftmax", .since = 13, .family = "softmax", .infer = infer_softmax, .lower = lower_softmax},
};

}  // namespace
}  // namespace cldl::graph
