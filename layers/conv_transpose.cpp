// ConvTranspose op (ONNX semantics, 1-D to 3-D: a direct gather kernel, or GEMM + col2im for 1-D / 2-D; kernels in
// kernels/conv.cl) and the host-side folding of an inference BatchNorm into conv weights.
#include <cmath>

#include "layers/conv.hpp"
#include "layers/conv_internal.hpp"
#include "layers/gemm.hpp"
#include "layers/norm.hpp"
#include "layers/strided.hpp"
#include "runtime/log.hpp"

namespace cldl {

namespace {
// Depth of a 3-D ConvTranspose (the 2-D geometry covers H and W).
struct TransposeDepth {
  int64_t D = 1, KD = 1, SD = 1, DD = 1, PF = 0, PBK = 0, OPD = 0, OD = 1;
};

// A 3-D problem is split into its depth and a 2-D problem over H and W, which parse_spatial checks.
ConvGeometry transpose_geometry(const ConvTransposeConfig& c, TransposeDepth* depth = nullptr) {
  ConvGeometry g;
  const Shape& ws = c.weight.shape();
  TransposeDepth td;
  const bool three_d = c.input.rank() == 5;
  Shape in = c.input, w = ws;
  std::vector<int64_t> strides = c.strides, dilations = c.dilations, pads = c.pads, output_padding = c.output_padding;
  if (three_d) {
    if (ws.rank() != 5)
      invalid("ConvTranspose", "weight rank {} does not match input rank 5 (weight shape {})", ws.rank(), ws.str());
    auto take = [](std::vector<int64_t>& v, size_t n, size_t at, const char* what) {
      if (v.empty()) return int64_t(-1);
      if (v.size() != n) invalid("ConvTranspose", "{} has {} values, expected {}", what, v.size(), n);
      int64_t x = v[at];
      v.erase(v.begin() + int64_t(at));
      return x;
    };
    td.D = c.input[2], td.KD = ws[2];
    if (int64_t s = take(strides, 3, 0, "strides"); s >= 0) td.SD = s;
    if (int64_t d = take(dilations, 3, 0, "dilations"); d >= 0) td.DD = d;
    if (!pads.empty()) {
      td.PF = take(pads, 6, 0, "pads");
      td.PBK = pads.at(2);
      pads.erase(pads.begin() + 2);
    }
    if (int64_t o = take(output_padding, 3, 0, "output_padding"); o >= 0) td.OPD = o;
    if (td.D <= 0 || td.KD <= 0) invalid("ConvTranspose", "depth {} and kernel depth {} must be positive", td.D, td.KD);
    if (td.SD <= 0 || td.DD <= 0)
      invalid("ConvTranspose", "depth stride {} and dilation {} must be positive", td.SD, td.DD);
    if (td.PF < 0 || td.PBK < 0) invalid("ConvTranspose", "depth pads ({}, {}) must be >= 0", td.PF, td.PBK);
    if (td.OPD < 0 || td.OPD >= std::max(td.SD, td.DD))
      invalid("ConvTranspose", "output_padding[0] = {} must be >= 0 and smaller than the depth stride or dilation",
              td.OPD);
    td.OD = td.SD * (td.D - 1) + td.OPD + (td.KD - 1) * td.DD + 1 - td.PF - td.PBK;
    if (td.OD <= 0)
      invalid("ConvTranspose", "depth pads ({}, {}) leave an empty output depth {}", td.PF, td.PBK, td.OD);
    in = Shape{c.input[0], c.input[1], c.input[3], c.input[4]};
    w = Shape{ws[0], ws[1], ws[3], ws[4]};
  }
  detail::parse_spatial("ConvTranspose", in, w, strides, dilations, pads, g);
  if (c.weight.dtype() != DType::f32)
    invalid("ConvTranspose", "weight must be f32, got {}", to_string(c.weight.dtype()));
  if (c.groups <= 0) invalid("ConvTranspose", "group must be positive, got {}", c.groups);
  if (g.C % c.groups) invalid("ConvTranspose", "input channels {} are not divisible by group {}", g.C, c.groups);
  if (ws[0] != g.C)
    invalid("ConvTranspose", "weight shape {}: dim 0 is {}, expected the input channels {}", ws.str(), ws[0], g.C);
  g.groups = c.groups;
  g.K = ws[1] * c.groups;
  if (c.bias) detail::check_tensor("ConvTranspose", "bias", *c.bias, Shape{g.K});
  const size_t sp = in.rank() - 2;
  if (!output_padding.empty() && output_padding.size() != sp)
    invalid("ConvTranspose", "output_padding has {} values, expected {}", c.output_padding.size(), c.input.rank() - 2);
  int64_t oph = 0, opw = 0;
  if (!output_padding.empty()) {
    const size_t first = three_d ? 1 : 0;  // index in the node's output_padding, for the message
    for (size_t i = 0; i < sp; ++i)
      if (output_padding[i] < 0)
        invalid("ConvTranspose", "output_padding[{}] must be >= 0, got {}", i + first, output_padding[i]);
    if (sp == 1) {
      opw = output_padding[0];
    } else {
      oph = output_padding[0], opw = output_padding[1];
    }
  }
  if (oph >= std::max(g.SH, g.DH) || opw >= std::max(g.SW, g.DW))
    invalid("ConvTranspose", "output_padding ({}, {}) must be smaller than the stride or dilation", oph, opw);
  g.OH = g.SH * (g.H - 1) + oph + (g.KH - 1) * g.DH + 1 - g.PT - g.PB;
  g.OW = g.SW * (g.W - 1) + opw + (g.KW - 1) * g.DW + 1 - g.PL - g.PR;
  if (g.OH <= 0 || g.OW <= 0)
    invalid("ConvTranspose", "pads ({}, {}, {}, {}) leave an empty output ({} x {})", g.PT, g.PL, g.PB, g.PR, g.OH, g.OW);
  if (depth) *depth = td;
  return g;
}
}  // namespace

Shape ConvTransposeOp::validate(const ConvTransposeConfig& c) {
  TransposeDepth td;
  ConvGeometry g = transpose_geometry(c, &td);
  if (c.input.rank() == 5) return Shape{g.N, g.K, td.OD, g.OH, g.OW};
  return g.one_d ? Shape{g.N, g.K, g.OW} : Shape{g.N, g.K, g.OH, g.OW};
}

std::unique_ptr<ConvTransposeOp> ConvTransposeOp::create(Context& ctx, int device, const ConvTransposeConfig& cfg) {
  std::unique_ptr<ConvTransposeOp> op(new ConvTransposeOp());
  TransposeDepth td;
  op->g_ = transpose_geometry(cfg, &td);
  op->depth_ = {{cl_int(td.D), cl_int(td.OD), cl_int(td.KD), cl_int(td.SD), cl_int(td.DD), cl_int(td.PF), 0, 0}};
  op->out_shape_ = validate(cfg);
  op->act_ = cfg.act;
  op->weight_ = ctx.upload(cfg.weight, device);
  op->has_bias_ = cfg.bias.has_value();
  if (op->has_bias_) op->bias_ = ctx.upload(*cfg.bias, device);
  const ConvGeometry& g = op->g_;
  const bool three_d = cfg.input.rank() == 5;
  const int64_t CG = g.C / g.groups, KG = g.K / g.groups;
  // The direct kernel does CG multiply-adds per tap with its input channels H * W apart, which a
  // CPU runtime gathers; the GEMM streams them. PoCL, `cldl bench kernels --filter conv_transpose`:
  // see the commit message for the figures behind the threshold of 8 channels per group.
  std::string why;
  if (cfg.algo == ConvTransposeAlgo::gemm_col2im && three_d)
    invalid("ConvTranspose", "algorithm gemm_col2im does not apply to the 3-D input {}", cfg.input.str());
  if (cfg.algo != ConvTransposeAlgo::automatic) {
    op->algo_ = cfg.algo, why = "requested";
  } else if (!three_d && CG >= 8) {
    op->algo_ = ConvTransposeAlgo::gemm_col2im, why = "1-D / 2-D, >= 8 input channels per group";
  } else {
    op->algo_ = ConvTransposeAlgo::direct, why = three_d ? "3-D" : "< 8 input channels per group";
  }
  cl::Program prog = ctx.program("conv.cl", fmt::format("-DACT={}", int(cfg.act.kind)), device);
  if (op->algo_ == ConvTransposeAlgo::direct) {
    op->kernel_ = make_kernel(prog, "conv_transpose_direct");
  } else {
    // CPUs: an output row per work-item, scattered from col without a division per tap; GPUs: a
    // work-item per output pixel.
    op->col2im_rows_ = ctx.device(device).info.type == DeviceType::cpu;
    op->kernel_ = make_kernel(prog, op->col2im_rows_ ? "col2im_transpose_rows" : "col2im_transpose");
    if (op->col2im_rows_) {
      const PaddedLaunch l = padded_launch(g.OH, g.N * g.K, 1, 16);
      op->col2im_global_ = l.global;
      op->col2im_local_ = l.local;
    }
    const int64_t M = KG * g.KH * g.KW, HW = g.H * g.W;
    GemmConfig gc;
    gc.M = M, gc.N = HW, gc.K = CG;
    gc.trans_a = true;  // the group's weight rows [CG][KG*KH*KW] are A^T
    gc.batch = g.N;
    gc.stride_a = 0;
    gc.stride_b = g.C * HW;
    gc.stride_c = g.K * g.KH * g.KW * HW;
    op->gemm_ = Gemm::create(ctx, device, gc);
    op->workspace_ = size_t(g.N * g.K * g.KH * g.KW * HW) * sizeof(float) + op->gemm_->workspace_bytes();
  }
  log::debug("ConvTranspose input {} weight {} -> {}: algorithm {} ({}){}", cfg.input.str(), cfg.weight.shape().str(),
             op->out_shape_.str(), op->algorithm(), why,
             op->algo_ == ConvTransposeAlgo::direct ? ""
             : op->col2im_rows_                     ? ", col2im by output rows"
                                                    : ", col2im by output pixels");
  return op;
}

void ConvTransposeOp::enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
                              ExecutionContext& ec) {
  if (inputs.size() != 1 || outputs.size() != 1)
    invalid("ConvTranspose", "expects 1 input and 1 output, got {} and {}", inputs.size(), outputs.size());
  const Tensor &x = inputs[0], &y = outputs[0];
  if (x.dtype != DType::f32 || y.dtype != DType::f32) invalid("ConvTranspose", "only f32 tensors are supported");
  if (x.numel() != g_.N * g_.C * depth_.s[0] * g_.H * g_.W)
    invalid("ConvTranspose", "input shape {} does not match the configured problem", x.shape.str());
  if (y.shape != out_shape_)
    invalid("ConvTranspose", "output shape {} does not match the expected {}", y.shape.str(), out_shape_.str());
  if (workspace_ && (!workspace || workspace->bytes() < workspace_))
    invalid("ConvTranspose", "algorithm {} needs a workspace of {} bytes, got {}", algorithm(), workspace_,
            workspace ? workspace->bytes() : 0);
  const Tensor& b = has_bias_ ? bias_ : y;
  std::lock_guard lock(launch_mutex_);
  if (algo_ == ConvTransposeAlgo::direct) {
    set_args(kernel_, detail::geometry_arg(g_), depth_, x.buffer, cl_long(x.offset_elems()), weight_.buffer,
             cl_long(weight_.offset_elems()), b.buffer, cl_long(b.offset_elems()), cl_int(has_bias_), y.buffer,
             cl_long(y.offset_elems()), act_.alpha, act_.beta);
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(g_.OW), size_t(g_.OH), size_t(g_.N * g_.K * depth_.s[1])),
                      cl::NullRange, "conv_transpose_direct");
    return;
  }
  const int64_t CG = g_.C / g_.groups, KG = g_.K / g_.groups, HW = g_.H * g_.W, M = KG * g_.KH * g_.KW;
  const int64_t col_elems = g_.N * g_.K * g_.KH * g_.KW * HW;
  auto f32_view = [](const Tensor& t, int64_t off_elems, int64_t n) {  // t's bytes as n floats
    Tensor v = t;
    v.dtype = DType::f32;
    v.offset_bytes += size_t(off_elems) * sizeof(float);
    v.shape = Shape{n};
    return v;
  };
  const Tensor col = f32_view(*workspace, 0, col_elems);
  const size_t gemm_ws = gemm_->workspace_bytes();
  Tensor gws;
  if (gemm_ws) gws = f32_view(*workspace, col_elems, int64_t(gemm_ws / sizeof(float)));
  for (int64_t grp = 0; grp < g_.groups; ++grp) {
    std::vector<Tensor> in{f32_view(weight_, grp * CG * M, CG * M),
                           f32_view(x, grp * CG * HW, x.numel() - grp * CG * HW)};
    Tensor out[1] = {f32_view(col, grp * M * HW, col_elems - grp * M * HW)};
    gemm_->enqueue(in, out, gemm_ws ? &gws : nullptr, ec);
  }
  if (col2im_rows_) {
    set_args(kernel_, detail::geometry_arg(g_), cl_int(g_.N * g_.K), col.buffer, cl_long(col.offset_elems()), b.buffer,
             cl_long(b.offset_elems()), cl_int(has_bias_), y.buffer, cl_long(y.offset_elems()), act_.alpha, act_.beta);
    ec.enqueue_kernel(kernel_, col2im_global_, col2im_local_, "col2im_transpose_rows");
    return;
  }
  set_args(kernel_, detail::geometry_arg(g_), col.buffer, cl_long(col.offset_elems()), b.buffer,
           cl_long(b.offset_elems()), cl_int(has_bias_), y.buffer, cl_long(y.offset_elems()), act_.alpha, act_.beta);
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(g_.OW), size_t(g_.OH), size_t(g_.N * g_.K)), cl::NullRange,
                    "col2im_transpose");
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
