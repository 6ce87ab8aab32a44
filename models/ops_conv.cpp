// ONNX Conv (1-D / 2-D, algorithm picked by ConvOp::choose; 3-D direct) and ConvTranspose (1-D to 3-D) mapped onto
// layers/conv.hpp. Weights and bias must be load-time constants (initializers): the op prepares them once
// (Winograd / FFT transforms). The activation-fusion pass of models/fusion.cpp folds an activation that is a
// Conv's only reader into the Conv (attributes _cldl_act*); it runs in the conv epilogue.

#include "layers/conv.hpp"
#include "models/ops_cnn_common.hpp"
#include "models/passes.hpp"  // fused_activation

namespace cldl::graph {
namespace {

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
  if (c.shape(0).rank() > 5)
    c.error("unsupported: {}-D convolution (1-D to 3-D are implemented)", c.shape(0).rank() - 2);
  auto cfg = checked(c, [&] { return conv_config(c.node, c.shape(0), c.value); });
  c.set(0, DType::f32, checked(c, [&] { return ConvOp::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_conv(LowerCtx& c) {
  auto op = ConvOp::create(c.ctx, c.device, conv_config(c.node, c.in[0].shape.to_shape(), c.value));
  std::string note = c.node.has("_cldl_act") ? fmt::format("{} fused", c.node.attr_s("_cldl_act", "")) : "";
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
  // output_shape / auto_pad SAME_*: turn the requested output size into explicit pads (ONNX: total =
  // stride * (in - 1) + output_padding + effective kernel - out, split as auto_pad says; SAME_UPPER
  // is the default split). A negative total grows the output at the end, as output_padding does.
  AutoPad ap = auto_pad_of(n);
  auto out_shape = n.attr_ints("output_shape");
  if (ap == AutoPad::valid) ap = AutoPad::notset;
  if (ap != AutoPad::notset || !out_shape.empty()) {
    size_t sp = cfg.input.rank() - 2;
    const Shape& w = cfg.weight.shape();
    if (w.rank() != sp + 2) fail("{}: weight {} does not match input {}", n.describe(), w.str(), cfg.input.str());
    cfg.pads.assign(2 * sp, 0);
    if (cfg.output_padding.empty()) cfg.output_padding.assign(sp, 0);
    for (size_t i = 0; i < sp; ++i) {
      int64_t st = cfg.strides.empty() ? 1 : cfg.strides.at(i), dl = cfg.dilations.empty() ? 1 : cfg.dilations.at(i);
      int64_t in = cfg.input[2 + i];
      int64_t want = out_shape.empty() ? in * st : out_shape.at(out_shape.size() - sp + i);
      int64_t total = st * (in - 1) + cfg.output_padding.at(i) + (w[2 + i] - 1) * dl + 1 - want;
      if (total < 0) {
        cfg.output_padding[i] -= total;
        continue;
      }
      bool lower = ap == AutoPad::same_lower;
      cfg.pads[i] = lower ? total - total / 2 : total / 2;
      cfg.pads[i + sp] = lower ? total / 2 : total - total / 2;
    }
  }
  return cfg;
}

void infer_convt(InferCtx& c) {
  need_f32(c);
  c.constant(1, "W");
  if (c.has_input(2)) c.constant(2, "B");
  if (c.shape(0).rank() > 5)
    c.error("unsupported: {}-D transposed convolution (1-D to 3-D are implemented)", c.shape(0).rank() - 2);
  auto cfg = checked(c, [&] { return convt_config(c.node, c.shape(0), c.value); });
  c.set(0, DType::f32, checked(c, [&] { return ConvTransposeOp::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_convt(LowerCtx& c) {
  return wrap(ConvTransposeOp::create(c.ctx, c.device, convt_config(c.node, c.in[0].shape.to_shape(), c.value)), c, {0});
}

const OpRegistration kConvOps{
    {.type = "Conv", .since = 1, .family = "conv", .const_inputs = {1, 2}, .infer = infer_conv, .lower = lower_conv},
    {.type = "ConvTranspose", .since = 1, .family = "conv", .const_inputs = {1, 2}, .infer = infer_convt,
     .lower = lower_convt},
};

}  // namespace
}  // namespace cldl::graph
