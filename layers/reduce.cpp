// Reductions and ArgMax / ArgMin: axis handling, collapsing kept and reduced dims, enqueue.
#include "layers/reduce.hpp"

#include <array>

#include "runtime/log.hpp"

namespace cldl {

namespace {
const ProgramVariants kReduceVariants("reduce.cl", {""});

constexpr std::array<const char*, 10> kReduceNames{"ReduceSum",          "ReduceMean", "ReduceMax", "ReduceMin",
                                                   "ReduceProd",         "ReduceSumSquare", "ReduceL2", "ReduceL1",
                                                   "ReduceLogSum",       "ReduceLogSumExp"};

// Which dims are reduced; empty when noop.
std::vector<bool> reduced_dims(const ReduceConfig& c) {
  const char* op = kReduceNames[int(c.op)];
  std::vector<bool> red(c.input.rank(), false);
  if (c.axes.empty()) {
    if (!c.noop_with_empty_axes) red.assign(c.input.rank(), true);
    return red;
  }
  for (size_t k = 0; k < c.axes.size(); ++k) {
    const int a = normalize_axis(op, "axes", c.axes[k], c.input.rank());
    if (red[a]) invalid(op, "axes[{}] = {} repeats axis {}", k, c.axes[k], a);
    red[a] = true;
  }
  return red;
}

// CumProd on signed integers runs the unsigned kernel of the same width: a two's-complement product
// wraps to the same bits.
const char* cumsum_kernel(DType t, bool product = false) {
  if (product) {
    switch (t) {
      case DType::f32: return "cumprod_f32";
      case DType::f64: return "cumprod_f64";
      case DType::i32: case DType::u32: return "cumprod_u32";
      case DType::i64: case DType::u64: return "cumprod_u64";
      default: return nullptr;
    }
  }
  switch (t) {
    case DType::f32: return "cumsum_f32";
    case DType::f64: return "cumsum_f64";
    case DType::i32: return "cumsum_i32";
    case DType::i64: return "cumsum_i64";
    case DType::u32: return "cumsum_u32";
    case DType::u64: return "cumsum_u64";
    default: return nullptr;
  }
}
}  // namespace

std::string_view to_string(ReduceOp op) { return kReduceNames[int(op)]; }

ReduceOp reduce_op_from_onnx(std::string_view name) {
  for (size_t i = 0; i < kReduceNames.size(); ++i)
    if (name == kReduceNames[i]) return ReduceOp(i);
  fail("Reduce: unknown op '{}'", name);
}

Shape Reduce::validate(const ReduceConfig& c) {
  const char* op = kReduceNames[int(c.op)];
  if (c.input.rank() > size_t(kMaxRank)) invalid(op, "input rank {} exceeds the supported {}", c.input.rank(), kMaxRank);
  const bool small = c.dtype == DType::boolean || c.dtype == DType::u8;
  const bool integer = c.dtype == DType::i32 || c.dtype == DType::i64;
  const bool int_op = c.op == ReduceOp::sum || c.op == ReduceOp::mean || c.op == ReduceOp::max || c.op == ReduceOp::min ||
                      c.op == ReduceOp::prod || c.op == ReduceOp::sum_square || c.op == ReduceOp::l1;
  if (c.dtype != DType::f32 && c.dtype != DType::f64 && !(small && (c.op == ReduceOp::max || c.op == ReduceOp::min)) &&
      !(integer && int_op))
    invalid(op,
            "input dtype {} is not supported (f32, f64; i32 and i64 but for L2 / LogSum / LogSumExp; bool and u8 "
            "for ReduceMax / ReduceMin)",
            to_string(c.dtype));
  auto red = reduced_dims(c);
  Shape o;
  for (size_t i = 0; i < c.input.rank(); ++i) {
    if (!red[i]) o.dims.push_back(c.input[i]);
    else if (c.keepdims) o.dims.push_back(1);
  }
  return o;
}

std::unique_ptr<Reduce> Reduce::create(Context& ctx, int device, const ReduceConfig& cfg) {
  std::unique_ptr<Reduce> r(new Reduce());
  r->cfg_ = cfg;
  r->out_ = validate(cfg);
  auto red = reduced_dims(cfg);
  auto is = contiguous_strides(cfg.input);
  std::vector<int64_t> kd, ks, rd, rs;
  for (size_t i = 0; i < cfg.input.rank(); ++i) {
    (red[i] ? rd : kd).push_back(cfg.input[i]);
    (red[i] ? rs : ks).push_back(is[i]);
  }
  r->keep_ = collapse(to_string(cfg.op), kd, {ks});
  r->red_ = collapse(to_string(cfg.op), rd, {rs});
  r->count_ = r->red_.inner() * r->red_.outer();
  r->n_out_ = r->keep_.inner() * r->keep_.outer();
  check_dtype_support(ctx.device(device), cfg.dtype, to_string(cfg.op));
  const char* kernel = cfg.dtype == DType::f64   ? "reduce_axes_f64"
                       : cfg.dtype == DType::f32 ? "reduce_axes"
                       : cfg.dtype == DType::i32 ? "reduce_axes_i32"
                       : cfg.dtype == DType::i64 ? "reduce_axes_i64"
                                                 : "reduce_axes_u8";
  r->kernel_ = make_kernel(ctx.program("reduce.cl", "", device), kernel);
  return r;
}

void Reduce::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  std::string_view op = type();
  if (in.size() != 1 || out.size() != 1) invalid(op, "expects 1 input and 1 output, got {} and {}", in.size(), out.size());
  const std::string dt(to_string(cfg_.dtype));
  if (in[0].shape != cfg_.input || in[0].dtype != cfg_.dtype)
    invalid(op, "input is {} {}, expected {} {}", to_string(in[0].dtype), in[0].shape.str(), dt, cfg_.input.str());
  if (out[0].shape != out_ || out[0].dtype != cfg_.dtype)
    invalid(op, "output is {} {}, expected {} {}", to_string(out[0].dtype), out[0].shape.str(), dt, out_.str());
  if (out_.numel() == 0) return;
  const int rr = red_.rank - 1;
  std::lock_guard lock(launch_mutex_);
  if (cfg_.dtype == DType::boolean || cfg_.dtype == DType::u8) {
    // The identity of an empty reduction: the smallest value for max, the largest for min.
    const cl_uchar init = cfg_.op == ReduceOp::max ? 0 : cfg_.dtype == DType::boolean ? 1 : 255;
    set_args(kernel_, cl_int(cfg_.op == ReduceOp::max), init, cl_int(keep_.rank), keep_.dims8(), keep_.strides8(0),
             cl_int(rr), red_.dims8(), red_.strides8(0), cl_long(red_.inner()), cl_long(red_.strides[0][rr]),
             cl_long(count_), in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
             cl_long(out[0].offset_elems()));
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(n_out_)), cl::NullRange, "reduce");
    return;
  }
  // Kept dims: all `rank` of them index the output; reduced: the innermost goes in r_len / r_stride.
  set_args(kernel_, cl_int(cfg_.op), cl_int(keep_.rank), keep_.dims8(), keep_.strides8(0), cl_int(rr), red_.dims8(),
           red_.strides8(0), cl_long(red_.inner()), cl_long(red_.strides[0][rr]), cl_long(count_), in[0].buffer,
           cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(n_out_)), cl::NullRange, "reduce");
}

Shape ArgReduce::validate(const ArgReduceConfig& c) {
  const char* op = c.is_min ? "ArgMin" : "ArgMax";
  if (c.input.rank() == 0) invalid(op, "input must have rank >= 1, got a scalar");
  const int a = normalize_axis(op, "axis", c.axis, c.input.rank());
  if (c.input[a] <= 0) invalid(op, "axis {} of shape {} is empty", a, c.input.str());
  Shape o;
  for (size_t i = 0; i < c.input.rank(); ++i)
    if (int(i) != a) o.dims.push_back(c.input[i]);
    else if (c.keepdims) o.dims.push_back(1);
  return o;
}

std::unique_ptr<ArgReduce> ArgReduce::create(Context& ctx, int device, const ArgReduceConfig& cfg) {
  std::unique_ptr<ArgReduce> r(new ArgReduce());
  r->cfg_ = cfg;
  r->out_ = validate(cfg);
  const int a = normalize_axis("ArgMax", "axis", cfg.axis, cfg.input.rank());
  for (int i = 0; i < a; ++i) r->outer_ *= cfg.input[i];
  r->len_ = cfg.input[a];
  for (size_t i = a + 1; i < cfg.input.rank(); ++i) r->inner_ *= cfg.input[i];
  r->kernel_ = make_kernel(ctx.program("reduce.cl", "", device), "arg_reduce");
  return r;
}

void ArgReduce::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  std::string_view op = type();
  if (in.size() != 1 || out.size() != 1) invalid(op, "expects 1 input and 1 output, got {} and {}", in.size(), out.size());
  if (in[0].shape != cfg_.input || in[0].dtype != DType::f32)
    invalid(op, "input is {} {}, expected f32 {}", to_string(in[0].dtype), in[0].shape.str(), cfg_.input.str());
  if (out[0].shape != out_ || out[0].dtype != DType::i64)
    invalid(op, "output is {} {}, expected i64 {}", to_string(out[0].dtype), out[0].shape.str(), out_.str());
  if (out_.numel() == 0) return;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(cfg_.is_min), cl_int(cfg_.select_last_index), cl_long(len_), in[0].buffer,
           cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(inner_), size_t(outer_)), cl::NullRange, "arg_reduce");
}

// ---------------------------------------------------------------- CumSum
Shape CumSum::validate(const CumSumConfig& c) {
  const char* op = c.product ? "CumProd" : "CumSum";
  if (!cumsum_kernel(c.dtype, c.product))
    invalid(op, "input dtype {} is not supported (f32, f64, i32, i64, u32, u64)", to_string(c.dtype));
  if (c.input.rank() == 0) invalid(op, "input must have rank >= 1, got a scalar");
  normalize_axis(op, "axis", c.axis, c.input.rank());
  return c.input;
}

std::unique_ptr<CumSum> CumSum::create(Context& ctx, int device, const CumSumConfig& cfg) {
  validate(cfg);
  std::unique_ptr<CumSum> r(new CumSum());
  r->cfg_ = cfg;
  const int a = normalize_axis(r->type(), "axis", cfg.axis, cfg.input.rank());
  for (int i = 0; i < a; ++i) r->outer_ *= cfg.input[i];
  r->len_ = cfg.input[a];
  for (size_t i = a + 1; i < cfg.input.rank(); ++i) r->inner_ *= cfg.input[i];
  check_dtype_support(ctx.device(device), cfg.dtype, r->type());
  r->kernel_ = make_kernel(ctx.program("reduce.cl", "", device), cumsum_kernel(cfg.dtype, cfg.product));
  return r;
}

void CumSum::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  if (in.size() != 1 || out.size() != 1)
    invalid(type(), "expects 1 input and 1 output, got {} and {}", in.size(), out.size());
  for (auto* t : {&in[0], &out[0]})
    if (t->shape != cfg_.input || t->dtype != cfg_.dtype)
      invalid(type(), "{} is {} {}, expected {} {}", t == &in[0] ? "input" : "output", to_string(t->dtype),
              t->shape.str(), to_string(cfg_.dtype), cfg_.input.str());
  if (cfg_.input.numel() == 0) return;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_long(len_), cl_int(cfg_.exclusive), cl_int(cfg_.reverse), in[0].buffer,
           cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(inner_), size_t(outer_)), cl::NullRange,
                    cfg_.product ? "cumprod" : "cumsum");
}

}  // namespace cldl
