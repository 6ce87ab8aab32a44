// ConvTranspose op (ONNX semantics, direct gather kernel in kernels/conv.cl) and the host-side folding of
// an inference BatchNorm into conv weights.
#include <cmath>

#include "layers/conv.hpp"
#include "layers/norm.hpp"
#include "layers/conv_internal.hpp"
#include "runtime/log.hpp"

namespace cldl {

namespace {
ConvGeometry transpose_geometry(const ConvTransposeConfig& c) {
  ConvGeometry g;
  const Shape& ws = c.weight.shape();
  detail::parse_spatial("ConvTranspose", c.input, ws, c.strides, c.dilations, c.pads, g);
  if (c.weight.dtype() != DType::f32)
    invalid("ConvTranspose", "weight must be f32, got {}", to_string(c.weight.dtype()));
  if (c.groups <= 0) invalid("ConvTranspose", "group must be positive, got {}", c.groups);
  if (g.C % c.groups) invalid("ConvTranspose", "input channels {} are not divisible by group {}", g.C, c.groups);
  if (ws[0] != g.C)
    invalid("ConvTranspose", "weight shape {}: dim 0 is {}, expected the input channels {}", ws.str(), ws[0], g.C);
  g.groups = c.groups;
  g.K = ws[1] * c.groups;
  if (c.bias) detail::check_tensor("ConvTranspose", "bias", *c.bias, Shape{g.K});
  const size_t sp = c.input.rank() - 2;
  if (!c.output_padding.empty() && c.output_padding.size() != sp)
    invalid("ConvTranspose", "output_padding has {} values, expected {}", c.output_padding.size(), sp);
  int64_t oph = 0, opw = 0;
  if (!c.output_padding.empty()) {
    for (size_t i = 0; i < sp; ++i)
      if (c.output_padding[i] < 0) invalid("ConvTranspose", "output_padding[{}] must be >= 0, got {}", i, c.output_padding[i]);
    if (sp == 1) {
      opw = c.output_padding[0];
    } else {
      oph = c.output_padding[0], opw = c.output_padding[1];
    }
  }
  if (oph >= std::max(g.SH, g.DH) || opw >= std::max(g.SW, g.DW))
    invalid("ConvTranspose", "output_padding ({}, {}) must be smaller than the stride or dilation", oph, opw);
  g.OH = g.SH * (g.H - 1) + oph + (g.KH - 1) * g.DH + 1 - g.PT - g.PB;
  g.OW = g.SW * (g.W - 1) + opw + (g.KW - 1) * g.DW + 1 - g.PL - g.PR;
  if (g.OH <= 0 || g.OW <= 0)
    invalid("ConvTranspose", "pads ({}, {}, {}, {}) leave an empty output ({} x {})", g.PT, g.PL, g.PB, g.PR, g.OH, g.OW);
  return g;
}
}  // namespace

Shape ConvTransposeOp::validate(const ConvTransposeConfig& c) {
  ConvGeometry g = transpose_geometry(c);
  return g.one_d ? Shape{g.N, g.K, g.OW} : Shape{g.N, g.K, g.OH, g.OW};
}

std::unique_ptr<ConvTransposeOp> ConvTransposeOp::create(Context& ctx, int device, const ConvTransposeConfig& cfg) {
  std::unique_ptr<ConvTransposeOp> op(new ConvTransposeOp());
  op->g_ = transpose_geometry(cfg);
  op->out_shape_ = validate(cfg);
  op->act_ = cfg.act;
  op->weight_ = ctx.upload(cfg.weight, device);
  op->has_bias_ = cfg.bias.has_value();
  if (op->has_bias_) op->bias_ = ctx.upload(*cfg.bias, device);
  op->kernel_ = make_kernel(ctx.program("conv.cl", fmt::format("-DACT={}", int(cfg.act.kind)), device),
                            "conv_transpose_direct");
  log::debug("ConvTranspose input {} weight {} -> {}: algorithm direct", cfg.input.str(), cfg.weight.shape().str(),
             op->out_shape_.str());
  return op;
}

void ConvTransposeOp::enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor*,
                              ExecutionContext& ec) {
  if (inputs.size() != 1 || outputs.size() != 1)
    invalid("ConvTranspose", "expects 1 input and 1 output, got {} and {}", inputs.size(), outputs.size());
  const Tensor &x = inputs[0], &y = outputs[0];
  if (x.dtype != DType::f32 || y.dtype != DType::f32) invalid("ConvTranspose", "only f32 tensors are supported");
  if (x.numel() != g_.N * g_.C * g_.H * g_.W)
    invalid("ConvTranspose", "input shape {} does not match the configured problem", x.shape.str());
  if (y.shape != out_shape_)
    invalid("ConvTranspose", "output shape {} does not match the expected {}", y.shape.str(), out_shape_.str());
  const Tensor& b = has_bias_ ? bias_ : y;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, detail::geometry_arg(g_), x.buffer, cl_long(x.offset_elems()), weight_.buffer,
           cl_long(weight_.offset_elems()), b.buffer, cl_long(b.offset_elems()), cl_int(has_bias_), y.buffer,
           cl_long(y.offset_elems()), act_.alpha, act_.beta);
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(g_.OW), size_t(g_.OH), size_t(g_.N * g_.K)), cl::NullRange,
                    "conv_transpose_direct");
}

void fold_batch_norm(HostTensor& weight, std::optional<HostTensor>& bias, const HostTensor& scale,
                     const HostTensor& b, const HostTensor& mean, const HostTensor& var, float epsilon) {
  if (weight.shape().rank() < 1 || weight.dtype() != DType::f32)
    invalid("BatchNorm", "weight to fold into must be f32 with rank >= 1, got {}", weight.shape().str());
  const int64_t K = weight.shape()[0];
  const Shape want{K};
  detail::check_tensor("BatchNorm", "scale", scale, want);
  detail::check_tensor("BatchNorm", "B", b, want);
  detail::check_tensor("BatchNorm", "mean", mean, want);
  detail::check_tensor("BatchNorm", "var", var, want);
  if (!(epsilon >= 0.0f)) invalid("BatchNorm", "epsilon must be >= 0, got {}", epsilon);
  if (bias) {
    detail::check_tensor("BatchNorm", "conv bias", *bias, want);
  } else {
    bias = HostTensor(DType::f32, want);
    std::fill(bias->as<float>(), bias->as<float>() + K, 0.0f);
  }
  for (int64_t k = 0; k < K; ++k)
    if (!(double(var.as<float>()[k]) + epsilon > 0.0))
      invalid("BatchNorm", "var[{}] + epsilon = {} must be positive", k, double(var.as<float>()[k]) + epsilon);
  // The arithmetic lives in one place (layers/norm.cpp); this form adds the tensor checks.
  fold_batch_norm(weight.span<float>(), bias->span<float>(), scale.span<float>(), b.span<float>(), mean.span<float>(),
                  var.span<float>(), epsilon);
}

}  // namespace cldl
