// ConvGrad and PoolGrad: shape checks and the launches of kernels/backward.cl (see layers/backward.hpp).
#include "layers/backward.hpp"

#include <cstdlib>

#include "layers/gemm.hpp"
#include "layers/strided.hpp"
#include "runtime/log.hpp"

namespace cldl {
namespace {

void check_tensor(std::string_view op, std::string_view arg, const Tensor& t, const Shape& s) {
  if (t.shape.numel() != s.numel()) invalid(op, "{} has shape {}, expected {}", arg, t.shape.str(), s.str());
  if (t.dtype != DType::f32) invalid(op, "{} has dtype {}, expected float", arg, to_string(t.dtype));
}

// [N, C, H, W] of a rank-4 shape, [N, C, 1, W] of a rank-3 one.
std::array<int64_t, 4> nchw(std::string_view op, std::string_view arg, const Shape& s) {
  if (s.rank() == 4) return {s[0], s[1], s[2], s[3]};
  if (s.rank() == 3) return {s[0], s[1], 1, s[2]};
  invalid(op, "{} must have rank 3 or 4 (1-D or 2-D windows), got shape {}", arg, s.str());
}

void validate_geometry(std::string_view op, const WindowGeometry& g) {
  if (g.x.rank() != g.y.rank()) invalid(op, "input {} and output {} differ in rank", g.x.str(), g.y.str());
  auto x = nchw(op, "input", g.x), y = nchw(op, "output", g.y);
  if (x[0] != y[0]) invalid(op, "input {} and output {} differ in batch", g.x.str(), g.y.str());
  for (int i = 0; i < 2; ++i) {
    if (g.kernel[i] < 1 || g.stride[i] < 1 || g.dilation[i] < 1)
      invalid(op, "kernel, strides and dilations must be positive, got {}, {}, {}", g.kernel[i], g.stride[i],
              g.dilation[i]);
    if (g.pad_begin[i] < 0 || g.pad_end[i] < 0) invalid(op, "pads must not be negative");
    // Each output position's window starts inside the padded input.
    const int64_t in = x[2 + i], out = y[2 + i];
    if (out > 0 && (out - 1) * g.stride[i] - g.pad_begin[i] >= in + g.pad_end[i])
      invalid(op, "output extent {} does not fit input extent {} with stride {} and pads {}, {}", out, in,
              g.stride[i], g.pad_begin[i], g.pad_end[i]);
  }
  for (auto d : g.x.dims)
    if (d > INT32_MAX / 4) invalid(op, "input dimension {} is too large", d);
}

// The build options that make a geometry compile-time constants of kernels/backward.cl (GEO_SPEC): the program
// is built once per geometry (the batch N stays an argument), so a layer's forward, data and filter kernels share it.
std::string geometry_options(const WindowGeometry& g, int groups, bool is_max, bool count_include_pad) {
  auto x = nchw("backward", "input", g.x), y = nchw("backward", "output", g.y);
  return fmt::format(
      "-DGEO_SPEC -DGEO_C={} -DGEO_H={} -DGEO_W={} -DGEO_M={} -DGEO_OH={} -DGEO_OW={} -DGEO_KH={} -DGEO_KW={} "
      "-DGEO_sh={} -DGEO_sw={} -DGEO_ph={} -DGEO_pw={} -DGEO_ph_end={} -DGEO_pw_end={} -DGEO_dh={} -DGEO_dw={} "
      "-DGEO_groups={} -DGEO_is_max={} -DGEO_count_include_pad={}",
      x[1], x[2], x[3], y[1], y[2], y[3], g.kernel[0], g.kernel[1], g.stride[0], g.stride[1], g.pad_begin[0],
      g.pad_begin[1], g.pad_end[0], g.pad_end[1], g.dilation[0], g.dilation[1], groups, int(is_max),
      int(count_include_pad));
}

std::string geometry_str(const WindowGeometry& g) {
  return fmt::format("kernel {}x{}, stride {}x{}, dilation {}x{}, pads {},{},{},{}", g.kernel[0], g.kernel[1],
                     g.stride[0], g.stride[1], g.dilation[0], g.dilation[1], g.pad_begin[0], g.pad_begin[1],
                     g.pad_end[0], g.pad_end[1]);
}

}  // namespace

std::string_view conv_name(ConvGradMode m) {
  return m == ConvGradMode::forward ? "ConvDynamic" : m == ConvGradMode::filter ? "ConvGradFilter" : "ConvGradData";
}

std::string_view ConvGrad::type() const { return conv_name(cfg_.mode); }

void ConvGrad::validate(const ConvGradConfig& c) {
  const std::string_view op = conv_name(c.mode);
  validate_geometry(op, c.geo);
  auto x = nchw(op, "input", c.geo.x), y = nchw(op, "output", c.geo.y);
  if (c.group < 1 || x[1] % c.group != 0 || y[1] % c.group != 0)
    invalid(op, "group {} does not divide the channels {} and {}", c.group, x[1], y[1]);
  const Shape w{y[1], x[1] / c.group, c.geo.kernel[0], c.geo.kernel[1]};
  if (c.w.numel() != w.numel() || c.w[0] != y[1])
    invalid(op, "weights have shape {}, expected {}", c.w.str(), w.str());
}

ConvGrad::~ConvGrad() = default;

namespace {

// ConvGradAlgo::automatic: the GEMM form for group 1 (the digits CNN's layers, batch 32: 3-10x the direct
// kernels' speed through PoCL, see docs/training.md "Speed"), the direct kernels otherwise; CLDL_CONV_GRAD
// (direct | gemm) overrides the automatic choice for A/B runs.
bool use_gemm(const ConvGradConfig& cfg) {
  if (cfg.algo != ConvGradAlgo::automatic) {
    if (cfg.algo == ConvGradAlgo::gemm && cfg.group != 1)
      invalid(conv_name(cfg.mode), "the gemm algorithm needs group 1, got group {}", cfg.group);
    return cfg.algo == ConvGradAlgo::gemm;
  }
  if (cfg.group != 1) return false;
  if (const char* e = std::getenv("CLDL_CONV_GRAD"); e && *e) {
    const std::string_view v(e);
    if (v != "direct" && v != "gemm")
      invalid(conv_name(cfg.mode), "CLDL_CONV_GRAD is '{}', expected direct or gemm", v);
    log::info("{}: CLDL_CONV_GRAD={} chooses the {} kernels", conv_name(cfg.mode), v, v);
    return v == "gemm";
  }
  return true;
}

}  // namespace

std::unique_ptr<ConvGrad> ConvGrad::create(Context& ctx, int device, const ConvGradConfig& cfg) {
  validate(cfg);
  std::unique_ptr<ConvGrad> o(new ConvGrad());
  o->cfg_ = cfg;
  const auto& g = cfg.geo;
  const auto x = nchw("ConvGrad", "input", g.x), y = nchw("ConvGrad", "output", g.y);
  const cl::Program prog = ctx.program("backward.cl", geometry_options(g, cfg.group, false, false), device);
  if (use_gemm(cfg)) {
    const int64_t N = x[0], C = x[1], M = y[1], P = y[2] * y[3], R = C * g.kernel[0] * g.kernel[1];
    o->pointwise_ = R == C && g.stride == std::array<int, 2>{1, 1} && g.pad_begin == std::array<int, 2>{0, 0} &&
                    g.pad_end == std::array<int, 2>{0, 0};
    GemmConfig gc;
    switch (cfg.mode) {
      case ConvGradMode::forward:  // y[n] (M x P) = w (M x R) col[:, n] (R x P): batched over n, w broadcast
        gc.M = M, gc.N = P, gc.K = R, gc.batch = N, gc.stride_a = 0;
        gc.ldb = o->pointwise_ ? P : N * P, gc.stride_b = o->pointwise_ ? C * P : P;
        gc.bias = cfg.bias ? GemmBias::per_row : GemmBias::none;
        if (!o->pointwise_) o->col_elems_ = R * N * P;
        break;
      case ConvGradMode::filter:  // dw (M x R) = dy by channel (M x N P) col^T (N P x R): the batch in K
        gc.M = M, gc.N = R, gc.K = N * P, gc.trans_b = true;
        o->col_elems_ = R * N * P;
        o->dyt_elems_ = M * N * P;
        break;
      case ConvGradMode::data:  // dcol[:, n] (R x P) = w^T (R x M) dy[n] (M x P): batched over n
        gc.M = R, gc.N = P, gc.K = M, gc.batch = N, gc.trans_a = true, gc.stride_a = 0;
        gc.ldc = o->pointwise_ ? P : N * P, gc.stride_c = o->pointwise_ ? C * P : P;
        if (!o->pointwise_) o->col_elems_ = R * N * P;
        break;
    }
    o->gemm_ = Gemm::create(ctx, device, gc);
    if (o->col_elems_ && cfg.mode != ConvGradMode::data) o->im2col_ = make_kernel(prog, "conv_im2col");
    if (o->col_elems_ && cfg.mode == ConvGradMode::data) o->col2im_ = make_kernel(prog, "conv_col2im");
    if (o->dyt_elems_) o->by_channel_ = make_kernel(prog, "conv_dy_by_channel");
    return o;
  }
  // The filter gradient keeps a work-item per (m, ci) and all its taps while that leaves enough work-items.
  const int64_t taps = int64_t(cfg.geo.kernel[0]) * cfg.geo.kernel[1];
  o->taps_ = cfg.mode == ConvGradMode::filter && taps > 1 && taps <= 49 && cfg.w.numel() / taps >= 64;
  o->kernel_ = make_kernel(prog, cfg.mode == ConvGradMode::forward  ? "conv_forward"
                                 : o->taps_                         ? "conv_grad_filter_taps"
                                 : cfg.mode == ConvGradMode::filter ? "conv_grad_filter"
                                                                    : "conv_grad_data");
  return o;
}

size_t ConvGrad::workspace_bytes() const {
  return gemm_ ? size_t(col_elems_ + dyt_elems_) * sizeof(float) + gemm_->workspace_bytes() : 0;
}

std::string ConvGrad::algorithm() const {
  if (gemm_)
    return fmt::format("{}{} ({}, group 1)",
                       cfg_.mode == ConvGradMode::data ? "GEMM" : pointwise_ && cfg_.mode == ConvGradMode::forward
                                                                      ? "GEMM on x"
                                                                      : "im2col + GEMM",
                       cfg_.mode == ConvGradMode::data ? (pointwise_ ? " into dx" : " + col2im")
                       : cfg_.mode == ConvGradMode::filter ? " over the batch" : "",
                       geometry_str(cfg_.geo)) +
           ", " + gemm_->algorithm();
  return fmt::format("direct, one work-item per {} ({}, group {})",
                     cfg_.mode == ConvGradMode::forward  ? "output element"
                     : cfg_.mode == ConvGradMode::filter ? "weight"
                                                         : "input element",
                     geometry_str(cfg_.geo), cfg_.group);
}

void ConvGrad::enqueue_gemm(std::span<const Tensor> in, const Tensor& out, const Tensor* workspace,
                            ExecutionContext& ec) {
  const std::string_view op = type();
  const size_t need = workspace_bytes();
  if (need && (!workspace || workspace->bytes() < need))
    invalid(op, "algorithm {} needs a workspace of {} bytes, got {}", algorithm(), need,
            workspace ? workspace->bytes() : 0);
  const auto& g = cfg_.geo;
  const auto x = nchw(op, "input", g.x), y = nchw(op, "output", g.y);
  const int64_t N = x[0], M = y[1], P = y[2] * y[3];
  Tensor ws;
  if (workspace) {
    ws = *workspace;
    ws.dtype = DType::f32;
    ws.shape = Shape{int64_t(workspace->bytes() / sizeof(float))};
  }
  const Tensor col = col_elems_ ? ws.slice_elems(0, col_elems_, Shape{col_elems_}) : Tensor{};
  const Tensor dyt = dyt_elems_ ? ws.slice_elems(col_elems_, dyt_elems_, Shape{dyt_elems_}) : Tensor{};
  const int64_t gemm_ws = int64_t(gemm_->workspace_bytes() / sizeof(float));
  const Tensor gws = gemm_ws ? ws.slice_elems(col_elems_ + dyt_elems_, gemm_ws, Shape{gemm_ws}) : Tensor{};
  const Tensor* gw = gemm_ws ? &gws : nullptr;
  auto flat = [](const Tensor& t) {
    Tensor v = t;
    v.shape = Shape{t.numel()};
    return v;
  };
  std::lock_guard lock(launch_mutex_);
  if (col_elems_ && cfg_.mode != ConvGradMode::data) {  // im2col of x (input 0 forward, input 1 filter)
    const Tensor& xs = cfg_.mode == ConvGradMode::forward ? in[0] : in[1];
    set_args(im2col_, cl_int(N), xs.buffer, cl_long(xs.offset_elems()), col.buffer, cl_long(col.offset_elems()));
    ec.enqueue_kernel(im2col_, cl::NDRange(size_t(N * P), size_t(col_elems_ / (N * P))), cl::NullRange,
                      "conv_im2col");
  }
  switch (cfg_.mode) {
    case ConvGradMode::forward: {
      std::vector<Tensor> ins{flat(in[1]), col_elems_ ? col : flat(in[0])};
      if (cfg_.bias) ins.push_back(flat(in[2]));
      const Tensor o[1] = {flat(out)};
      gemm_->enqueue(ins, o, gw, ec);
      break;
    }
    case ConvGradMode::filter: {
      set_args(by_channel_, in[0].buffer, cl_long(in[0].offset_elems()), dyt.buffer, cl_long(dyt.offset_elems()));
      ec.enqueue_kernel(by_channel_, cl::NDRange(size_t(P), size_t(M), size_t(N)), cl::NullRange,
                        "conv_dy_by_channel");
      const Tensor ins[2] = {dyt, col}, o[1] = {flat(out)};
      gemm_->enqueue(ins, o, gw, ec);
      break;
    }
    case ConvGradMode::data: {
      const Tensor ins[2] = {flat(in[1]), flat(in[0])}, o[1] = {col_elems_ ? col : flat(out)};
      gemm_->enqueue(ins, o, gw, ec);
      if (col_elems_) {
        set_args(col2im_, cl_int(N), col.buffer, cl_long(col.offset_elems()), out.buffer, cl_long(out.offset_elems()));
        ec.enqueue_kernel(col2im_, cl::NDRange(size_t(out.numel())), cl::NullRange, "conv_col2im");
      }
      break;
    }
  }
}

void ConvGrad::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* ws,
                       ExecutionContext& ec) {
  const std::string_view op = type();
  const size_t n_in = cfg_.mode == ConvGradMode::forward && cfg_.bias ? 3 : 2;
  if (in.size() != n_in || out.size() != 1)
    invalid(op, "expects {} inputs and 1 output, got {} and {}", n_in, in.size(), out.size());
  const auto& g = cfg_.geo;
  const bool fwd = cfg_.mode == ConvGradMode::forward, filter = cfg_.mode == ConvGradMode::filter;
  check_tensor(op, fwd ? "input x" : "input dy", in[0], fwd ? g.x : g.y);
  check_tensor(op, filter ? "input x" : "input w", in[1], filter ? g.x : cfg_.w);
  if (n_in == 3) check_tensor(op, "input b", in[2], Shape{cfg_.w[0]});
  check_tensor(op, fwd ? "output y" : filter ? "output dw" : "output dx", out[0], fwd ? g.y : filter ? cfg_.w : g.x);
  auto x = nchw(op, "input", g.x), y = nchw(op, "output", g.y);
  const size_t items = size_t(out[0].numel());
  if (items == 0) return;
  if (gemm_) {
    enqueue_gemm(in, out[0], ws, ec);
    return;
  }
  std::lock_guard lock(launch_mutex_);
  const cl_int kh = g.kernel[0], kw = g.kernel[1], sh = g.stride[0], sw = g.stride[1], ph = g.pad_begin[0],
               pw = g.pad_begin[1], dh = g.dilation[0], dw = g.dilation[1], group = cfg_.group;
  if (fwd) {
    const Tensor& b = n_in == 3 ? in[2] : in[1];  // without a bias the kernel reads none: any buffer
    set_args(kernel_, cl_int(x[1]), cl_int(x[2]), cl_int(x[3]), cl_int(y[1]), cl_int(y[2]), cl_int(y[3]), kh, kw, sh,
             sw, ph, pw, dh, dw, group, cl_int(n_in == 3), in[0].buffer, cl_long(in[0].offset_elems()), in[1].buffer,
             cl_long(in[1].offset_elems()), b.buffer, cl_long(b.offset_elems()), out[0].buffer,
             cl_long(out[0].offset_elems()));
  } else if (filter && taps_) {
    set_args(kernel_, cl_int(x[0]), in[0].buffer, cl_long(in[0].offset_elems()), in[1].buffer,
             cl_long(in[1].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
    ec.enqueue_kernel(kernel_, cl::NDRange(items / size_t(kh * kw)), cl::NullRange, "conv_grad_filter");
    return;
  } else if (filter) {
    set_args(kernel_, cl_int(x[0]), cl_int(x[1]), cl_int(x[2]), cl_int(x[3]), cl_int(y[1]), cl_int(y[2]),
             cl_int(y[3]), kh, kw, sh, sw, ph, pw, dh, dw, group, in[0].buffer, cl_long(in[0].offset_elems()),
             in[1].buffer, cl_long(in[1].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  } else {
    set_args(kernel_, cl_int(x[1]), cl_int(x[2]), cl_int(x[3]), cl_int(y[1]), cl_int(y[2]), cl_int(y[3]), kh, kw, sh,
             sw, ph, pw, dh, dw, group, in[0].buffer, cl_long(in[0].offset_elems()), in[1].buffer,
             cl_long(in[1].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  }
  ec.enqueue_kernel(kernel_, cl::NDRange(items), cl::NullRange,
                    fwd ? "conv_forward" : filter ? "conv_grad_filter" : "conv_grad_data");
}

void PoolGrad::validate(const PoolGradConfig& c) {
  const std::string_view op = c.max ? "MaxPoolGrad" : "AveragePoolGrad";
  validate_geometry(op, c.geo);
  if (c.geo.x[1] != c.geo.y[1])
    invalid(op, "input {} and output {} differ in channels", c.geo.x.str(), c.geo.y.str());
}

std::unique_ptr<PoolGrad> PoolGrad::create(Context& ctx, int device, const PoolGradConfig& cfg) {
  validate(cfg);
  std::unique_ptr<PoolGrad> o(new PoolGrad());
  o->cfg_ = cfg;
  o->kernel_ = make_kernel(
      ctx.program("backward.cl", geometry_options(cfg.geo, 1, cfg.max, cfg.count_include_pad), device), "pool_grad");
  return o;
}

std::string PoolGrad::algorithm() const {
  return fmt::format("direct gather over the windows holding each input element{} ({})",
                     cfg_.max ? ", argmax recomputed" : "", geometry_str(cfg_.geo));
}

void PoolGrad::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  const std::string_view op = type();
  if (in.size() != 2 || out.size() != 1)
    invalid(op, "expects 2 inputs and 1 output, got {} and {}", in.size(), out.size());
  const auto& g = cfg_.geo;
  check_tensor(op, "input dy", in[0], g.y);
  check_tensor(op, "input x", in[1], g.x);
  check_tensor(op, "output dx", out[0], g.x);
  auto x = nchw(op, "input", g.x), y = nchw(op, "output", g.y);
  const size_t items = size_t(out[0].numel());
  if (items == 0) return;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(cfg_.max), cl_int(cfg_.count_include_pad), cl_int(x[2]), cl_int(x[3]), cl_int(y[2]),
           cl_int(y[3]), cl_int(g.kernel[0]), cl_int(g.kernel[1]), cl_int(g.stride[0]), cl_int(g.stride[1]),
           cl_int(g.pad_begin[0]), cl_int(g.pad_begin[1]), cl_int(g.pad_end[0]), cl_int(g.pad_end[1]),
           cl_int(g.dilation[0]), cl_int(g.dilation[1]), in[0].buffer, cl_long(in[0].offset_elems()), in[1].buffer,
           cl_long(in[1].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(items), cl::NullRange, "pool_grad");
}

Shape GatherGrad::validate(const GatherGradConfig& c) {
  const int64_t r = int64_t(c.out.rank());
  if (r < 1) invalid("GatherGrad", "the data must have rank 1 or more, got shape {}", c.out.str());
  if (c.axis < 0 || c.axis >= r) invalid("GatherGrad", "axis {} is outside rank {}", c.axis, r);
  if (c.index != DType::i64 && c.index != DType::i32)
    invalid("GatherGrad", "indices are {}, expected int64 or int32", to_string(c.index));
  Shape dy;
  for (int64_t i = 0; i < c.axis; ++i) dy.dims.push_back(c.out[size_t(i)]);
  for (auto d : c.indices.dims) dy.dims.push_back(d);
  for (int64_t i = c.axis + 1; i < r; ++i) dy.dims.push_back(c.out[size_t(i)]);
  return dy;
}

std::unique_ptr<GatherGrad> GatherGrad::create(Context& ctx, int device, const GatherGradConfig& cfg) {
  std::unique_ptr<GatherGrad> o(new GatherGrad());
  o->dy_ = validate(cfg);
  o->cfg_ = cfg;
  o->kernel_ = make_kernel(
      ctx.program("backward.cl", cfg.index == DType::i64 ? "-DINDEX_T=long" : "-DINDEX_T=int", device), "gather_grad");
  return o;
}

void GatherGrad::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  if (in.size() != 2 || out.size() != 1)
    invalid("GatherGrad", "expects 2 inputs and 1 output, got {} and {}", in.size(), out.size());
  check_tensor("GatherGrad", "input dy", in[0], dy_);
  if (in[1].numel() != cfg_.indices.numel() || in[1].dtype != cfg_.index)
    invalid("GatherGrad", "input indices has shape {} ({}), expected {} ({})", in[1].shape.str(),
            to_string(in[1].dtype), cfg_.indices.str(), to_string(cfg_.index));
  check_tensor("GatherGrad", "output dx", out[0], cfg_.out);
  const size_t items = size_t(out[0].numel());
  if (items == 0) return;
  int64_t inner = 1;
  for (size_t i = size_t(cfg_.axis) + 1; i < cfg_.out.rank(); ++i) inner *= cfg_.out[i];
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_long(cfg_.indices.numel()), cl_long(cfg_.out[size_t(cfg_.axis)]), cl_long(inner), in[0].buffer,
           cl_long(in[0].offset_elems()), in[1].buffer, cl_long(in[1].offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(items), cl::NullRange, "gather_grad");
}

void TrainingDropout::validate(const DropoutConfig& c) {
  if (!(c.ratio >= 0.0f && c.ratio <= 1.0f)) invalid("TrainingDropout", "ratio must be in [0, 1], got {}", c.ratio);
}

std::unique_ptr<TrainingDropout> TrainingDropout::create(Context& ctx, int device, const DropoutConfig& cfg) {
  validate(cfg);
  std::unique_ptr<TrainingDropout> o(new TrainingDropout());
  o->cfg_ = cfg;
  o->kernel_ = make_kernel(ctx.program("backward.cl", "", device), "dropout_train");
  return o;
}

std::string TrainingDropout::algorithm() const {
  return fmt::format("ratio {}, seed {}: a hashed draw per element and step", cfg_.ratio, cfg_.seed);
}

void TrainingDropout::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                              ExecutionContext& ec) {
  if (in.size() != 2 || out.size() != 2)
    invalid("TrainingDropout", "expects 2 inputs and 2 outputs, got {} and {}", in.size(), out.size());
  check_tensor("TrainingDropout", "input x", in[0], cfg_.shape);
  if (in[1].numel() != 1 || in[1].dtype != DType::i64)
    invalid("TrainingDropout", "input T must be one int64, got shape {} ({})", in[1].shape.str(),
            to_string(in[1].dtype));
  check_tensor("TrainingDropout", "output y", out[0], cfg_.shape);
  check_tensor("TrainingDropout", "output scale", out[1], cfg_.shape);
  const size_t items = size_t(cfg_.shape.numel());
  if (items == 0) return;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_float(cfg_.ratio), cl_uint(cfg_.seed), in[1].buffer, cl_long(in[1].offset_elems()), in[0].buffer,
           cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()), out[1].buffer,
           cl_long(out[1].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(items), cl::NullRange, "dropout_train");
}

void BatchNormGrad::validate(const BatchNormGradConfig& c) {
  if (c.x.rank() < 2) invalid("BatchNormGrad", "x must be [N, C, ...], got shape {}", c.x.str());
  if (!(c.epsilon >= 0.0f)) invalid("BatchNormGrad", "epsilon must not be negative, got {}", c.epsilon);
}

std::unique_ptr<BatchNormGrad> BatchNormGrad::create(Context& ctx, int device, const BatchNormGradConfig& cfg) {
  validate(cfg);
  std::unique_ptr<BatchNormGrad> o(new BatchNormGrad());
  o->cfg_ = cfg;
  o->kernel_ = make_kernel(ctx.program("norm.cl", "-DACT=0", device), "batch_norm_grad");  // with batch_norm_train
  // CPUs: a work-item per channel, as batch_norm_train (layers/norm.cpp).
  o->group_ = ctx.device(device).info.type == DeviceType::cpu ? 1
                                                               : reduction_group_size(o->kernel_, ctx.device(device), 256);
  return o;
}

std::string BatchNormGrad::algorithm() const {
  return fmt::format("one work-group of {} per channel: batch statistics, the two sums and dx in one launch", group_);
}

void BatchNormGrad::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                            ExecutionContext& ec) {
  if (in.size() != 3 || out.size() != 3)
    invalid("BatchNormGrad", "expects 3 inputs and 3 outputs, got {} and {}", in.size(), out.size());
  const Shape& x = cfg_.x;
  const int64_t C = x[1], N = x[0], spatial = C && N ? x.numel() / (C * N) : 0;
  check_tensor("BatchNormGrad", "input dy", in[0], x);
  check_tensor("BatchNormGrad", "input x", in[1], x);
  check_tensor("BatchNormGrad", "input scale", in[2], Shape{C});
  check_tensor("BatchNormGrad", "output dx", out[0], x);
  check_tensor("BatchNormGrad", "output dscale", out[1], Shape{C});
  check_tensor("BatchNormGrad", "output dbias", out[2], Shape{C});
  if (x.numel() == 0) return;
  std::lock_guard lock(launch_mutex_);
  auto off = [](const Tensor& t) { return cl_long(t.offset_elems()); };
  set_args(kernel_, cl_int(N), cl_int(C), cl_long(spatial), cl_float(cfg_.epsilon), in[0].buffer, off(in[0]),
           in[1].buffer, off(in[1]), in[2].buffer, off(in[2]), out[0].buffer, off(out[0]), out[1].buffer, off(out[1]),
           out[2].buffer, off(out[2]), cl::Local(group_ * sizeof(float)));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(C) * group_), cl::NDRange(group_), "batch_norm_grad");
}

}  // namespace cldl
