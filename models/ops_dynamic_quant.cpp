// ONNX DynamicQuantizeLinear on layers/dynamic_quant.hpp: f32 in; y (u8), y_scale and y_zero_point out.
#include "layers/dynamic_quant.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

void infer_dynamic_quantize(InferCtx& c) {
  if (c.input(0).dtype != DType::f32)
    c.error("input '{}' must be f32, got {}", c.input(0).name, to_string(c.input(0).dtype));
  const Shape s = checked(c, [&] { return DynamicQuantizeLinear::validate({c.shape(0)}); });
  c.set(0, DType::u8, s);
  c.set(1, DType::f32, Shape{});
  c.set(2, DType::u8, Shape{});
}

std::unique_ptr<NodeKernel> lower_dynamic_quantize(LowerCtx& c) {
  return wrap(DynamicQuantizeLinear::create(c.ctx, c.device, {c.in[0].shape.to_shape()}), c);
}

const OpRegistration kDynamicQuantOps{
    {.type = "DynamicQuantizeLinear",
     .since = 11,
     .family = "quant",
     .infer = infer_dynamic_quantize,
     .lower = lower_dynamic_quantize},
};

}  // namespace
}  // namespace cldl::graph
