// ONNX Conv (1-D / 2-D, algorithm picked by ConvOp::choose) and ConvTranspose mapped onto
// layers/conv.hpp. Weights and bias must be load-time constants (initializers): the op prepares them once
// (Winograd / FFT transforms). An activation fused by the fusion pass (_cldl_act) runs in the epilogue.
#include "layers/conv.hpp"
#include "models/ops_cnn_common.hpp"
#include "models/passes.hpp"

namespace cldl::graph {
namespace {

AutoPad auto_pad_of(const Node& n) {
  std::string s = n.attr_s("auto_pad", "NOTSET");
  if (s == "SAME_UPPER") return AutoPad::same_upper;
  if (s == "SAME_LOWER") return AutoPad::same_lower;
  if (s == "VALID") return AutoPad::valid;
  if (s != "NOTSET") fail("{}: auto_pad '{}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", n.describe(), s);
  return AutoPad::notset;
}

void need_f32(const InferCtx& c) {
  for (size_t i = 0; i < c.in.size(); ++i)
    if (c.has_input(i) && c.input(i).dtype != DType::f32)
      c.error("unsupported: input '{}' is {}, only f32 is implemented", c.input(i).name, to_string(c.input(i).dtype));
}

ConvConfig conv_config(const Node& n, Shape x, const std::vector<const HostTensor*>& v) {
  ConvConfig cfg;
  cfg.input = std::move(x);
  cfg.weight = *v.at(1);
  if (v.size() > 2 && v[2]) cfg.bias = *v[2];
  cfg.strides = n.attr_ints("strides");
  cfg.dilations = n.attr_ints("dilations");
  cfg.pads = n.attr_ints("pads");
  cfg.auto_pad = auto_pad_of(n);
  cfg.groups = n.attr_i("group", 1);
  cfg.act = fused_activation(n);
  return cfg;
}

void infer_conv(InferCtx& c) {
  need_f32(c);
  c.constant(1, "W");
  if (c.has_input(2)) c.constant(2, "B");
  if (c.shape(0).rank() > 4) c.error("unsupported: {}-D convolution (1-D and 2-D are implemented)", c.shape(0).rank() - 2);
  auto cfg = checked(c, [&] { return conv_config(c.node, c.shape(0), c.value); });
  c.set(0, DType::f32, checked(c, [&] { return ConvOp::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_conv(LowerCtx& c) {
  auto op = ConvOp::create(c.ctx, c.device, conv_config(c.node, c.in[0].shape.to_shape(), c.value));
  std::string note = op->geom().K > 0 && c.node.has("_cldl_act") ? fmt::format("{} fused", c.node.attr_s("_cldl_act", "")) : "";
  return wrap(std::move(op), c, {0}, note);
}

ConvTransposeConfig convt_config(const Node& n, Shape x, const std::vector<const HostTensor*>& v) {
  ConvTransposeConfig cfg;
  cfg.input = std::move(x);
  cfg.weight = *v.at(1);
  if (v.size() > 2 && v[2]) cfg.bias = *v[2];
  cfg.strides = n.attr_ints("strides");
  cfg.dilations = n.attr_ints("dilations");
  cfg.pads = n.attr_ints("pads");
  cfg.output_padding = n.attr_ints("output_padding");
  cfg.groups = n.attr_i("group", 1);
  cfg.act = fused_activation(n);
  if (auto_pad_of(n) != AutoPad::notset) fail("{}: auto_pad other than NOTSET is not supported", n.describe());
  if (!n.attr_ints("output_shape").empty()) fail("{}: the output_shape attribute is not supported", n.describe());
  return cfg;
}

void infer_convt(InferCtx& c) {
  need_f32(c);
  c.constant(1, "W");
  if (c.has_input(2)) c.constant(2, "B");
  if (c.shape(0).rank() > 4) c.error("unsupported: {}-D transposed convolution (1-D and 2-D are implemented)", c.shape(0).rank() - 2);
  auto cfg = checked(c, [&] { return convt_config(c.node, c.shape(0), c.value); });
  c.set(0, DType::f32, checked(c, [&] { return ConvTransposeOp::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_convt(LowerCtx& c) {
  return wrap(ConvTransposeOp::create(c.ctx, c.device, convt_config(c.node, c.in[0].shape.to_shape(), c.value)), c, {0});
}

const OpRegistration kConvOps{
    {.type = "Conv", .since = 11, .family = "conv", .const_inputs = {1, 2}, .infer = infer_conv, .lower = lower_conv},
    {.type = "ConvTranspose", .since = 11, .family = "conv", .const_inputs = {1, 2}, .infer = infer_convt,
     .lower = lower_convt},
};

}  // namespace
}  // namespace cldl::graph
