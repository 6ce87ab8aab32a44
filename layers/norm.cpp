// Normalisation ops: validation and enqueue (kernels/norm.cl).
#include "layers/norm.hpp"

#include <cmath>

#include "layers/strided.hpp"
#include "runtime/log.hpp"

namespace cldl {

namespace {
const ProgramVariants kNormVariants("norm.cl", {"-DACT=0"});

const char* norm_name(NormKind k) {
  return k == NormKind::batch ? "BatchNormalization" : k == NormKind::instance ? "InstanceNormalization"
                                                                                : "GroupNormalization";
}
}  // namespace

std::string_view Norm::type() const { return norm_name(cfg_.kind); }

Shape Norm::validate(const NormConfig& c) {
  const char* op = norm_name(c.kind);
  if (c.input.rank() < 2) invalid(op, "input X must have rank >= 2 (N, C, ...), got shape {}", c.input.str());
  for (auto d : c.input.dims)
    if (d <= 0) invalid(op, "input X has a non-positive dimension in shape {}", c.input.str());
  if (!(c.epsilon >= 0.0f)) invalid(op, "epsilon must be non-negative, got {}", c.epsilon);
  if (c.training && c.kind != NormKind::batch) invalid(op, "training mode exists only for BatchNormalization");
  if (c.training && !(c.momentum >= 0.0f && c.momentum <= 1.0f))
    invalid(op, "momentum must be in [0, 1], got {}", c.momentum);
  if (c.kind == NormKind::group) {
    if (c.num_groups <= 0) invalid(op, "num_groups must be positive, got {}", c.num_groups);
    if (c.input[1] % c.num_groups)
      invalid(op, "channels {} are not divisible by num_groups {}", c.input[1], c.num_groups);
  }
  return c.input;
}

std::unique_ptr<Norm> Norm::create(Context& ctx, int device, const NormConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Norm> n(new Norm());
  n->cfg_ = cfg;
  cl::Program prog = ctx.program("norm.cl", fmt::format("-DACT={}", int(cfg.act.kind)), device);
  if (cfg.kind == NormKind::batch && cfg.training) {
    n->kernel_ = make_kernel(prog, "batch_norm_train");
    // CPUs: a work-item per channel. A work-group runs on one thread there anyway, and the tree sums' barriers
    // over 256 items (most idle on a 4x4 plane) cost more than the channel's serial sums (digits CNN, batch 32:
    // see docs/training.md "Speed").
    n->group_ = ctx.device(device).info.type == DeviceType::cpu ? 1
                                                                 : reduction_group_size(n->kernel_, ctx.device(device), 256);
    n->algorithm_ = fmt::format("training mode: batch statistics, one work-group per channel ({} items)", n->group_);
  } else if (cfg.kind == NormKind::batch) {
    n->kernel_ = make_kernel(prog, "batch_norm");
    n->algorithm_ = "element-wise";
  } else {
    n->kernel_ = make_kernel(prog, "group_norm");
    n->group_ = reduction_group_size(n->kernel_, ctx.device(device), 256);
    n->algorithm_ = fmt::format("work-group two-pass statistics ({} items per group)", n->group_);
  }
  log::debug("{} {}: {}", norm_name(cfg.kind), cfg.input.str(), n->algorithm_);
  return n;
}

void Norm::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  const char* op = norm_name(cfg_.kind);
  const size_t n_in = cfg_.kind == NormKind::batch ? 5 : 3, max_out = cfg_.training ? 3 : 1;
  if (in.size() != n_in || out.empty() || out.size() > max_out)
    invalid(op, "expects {} inputs and {} output{}, got {} and {}", n_in, cfg_.training ? "1 to 3" : "1",
            cfg_.training ? "s" : "", in.size(), out.size());
  const int64_t N = cfg_.input[0], C = cfg_.input[1], spatial = cfg_.input.numel() / (N * C);
  const int G = cfg_.kind == NormKind::instance ? int(C) : cfg_.kind == NormKind::group ? cfg_.num_groups : 1;
  const int64_t params = cfg_.kind == NormKind::group && cfg_.scale_per_group ? G : C;
  static const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (size_t i = 0; i < n_in; ++i) {
    if (in[i].dtype != DType::f32) invalid(op, "input {} has dtype {}, expected f32", names[i], to_string(in[i].dtype));
    if (i == 0 ? in[i].shape != cfg_.input : in[i].numel() != params)
      invalid(op, "input {} has shape {}, expected {}", names[i], in[i].shape.str(),
              i == 0 ? cfg_.input.str() : fmt::format("[{}]", params));
  }
  if (out[0].shape != cfg_.input || out[0].dtype != DType::f32)
    invalid(op, "output Y is {} {}, expected f32 {}", to_string(out[0].dtype), out[0].shape.str(), cfg_.input.str());
  auto off = [](const Tensor& t) { return cl_long(t.offset_elems()); };
  std::lock_guard lock(launch_mutex_);
  if (cfg_.training) {
    // Running statistics: written when the output is there (a left-out one is an empty tensor).
    auto stat = [&](size_t i) { return i < out.size() && out[i].valid(); };
    static const char* out_names[] = {"Y", "running_mean", "running_var"};
    for (size_t i = 1; i < 3; ++i)
      if (stat(i) && (out[i].dtype != DType::f32 || out[i].numel() != C))
        invalid(op, "output {} is {} {}, expected f32 [{}]", out_names[i], to_string(out[i].dtype), out[i].shape.str(),
                C);
    const Tensor &rm = stat(1) ? out[1] : out[0], &rv = stat(2) ? out[2] : out[0];
    set_args(kernel_, cl_int(N), cl_int(C), cl_long(spatial), cfg_.epsilon, cfg_.momentum, cl_int(stat(1)),
             cl_int(stat(2)), cfg_.act.alpha, cfg_.act.beta, in[0].buffer, off(in[0]), in[1].buffer, off(in[1]),
             in[2].buffer, off(in[2]), in[3].buffer, off(in[3]), in[4].buffer, off(in[4]), out[0].buffer, off(out[0]),
             rm.buffer, off(rm), rv.buffer, off(rv), cl::Local(group_ * sizeof(float)));
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(C) * group_), cl::NDRange(group_), "batch_norm_train");
    return;
  }
  if (cfg_.kind == NormKind::batch) {
    set_args(kernel_, cl_int(C), cl_long(spatial), cfg_.epsilon, cfg_.act.alpha, cfg_.act.beta, in[0].buffer, off(in[0]),
             in[1].buffer, off(in[1]), in[2].buffer, off(in[2]), in[3].buffer, off(in[3]), in[4].buffer, off(in[4]),
             out[0].buffer, off(out[0]));
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(spatial), size_t(N * C)), cl::NullRange, "batch_norm");
    return;
  }
  set_args(kernel_, cl_int(G), cl_int(C / G), cl_long(spatial), cl_int(cfg_.kind == NormKind::group && cfg_.scale_per_group),
           cfg_.epsilon, cfg_.act.alpha, cfg_.act.beta, in[0].buffer, off(in[0]), in[1].buffer, off(in[1]), in[2].buffer,
           off(in[2]), out[0].buffer, off(out[0]), cl::Local(group_ * sizeof(float)));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(N * G) * group_), cl::NDRange(group_), "group_norm");
}

// ---------------------------------------------------------------- LRN
Shape Lrn::validate(const LrnConfig& c) {
  if (c.input.rank() < 2) invalid("LRN", "input X must have rank >= 2 (N, C, ...), got shape {}", c.input.str());
  for (auto d : c.input.dims)
    if (d <= 0) invalid("LRN", "input X has a non-positive dimension in shape {}", c.input.str());
  if (c.size <= 0) invalid("LRN", "size must be positive, got {}", c.size);
  return c.input;
}

std::unique_ptr<Lrn> Lrn::create(Context& ctx, int device, const LrnConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Lrn> l(new Lrn());
  l->cfg_ = cfg;
  l->kernel_ = make_kernel(ctx.program("norm.cl", "-DACT=0", device), "lrn");
  return l;
}

void Lrn::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  if (in.size() != 1 || out.size() != 1)
    invalid("LRN", "expects 1 input and 1 output, got {} and {}", in.size(), out.size());
  for (auto [t, name] : {std::pair{&in[0], "input X"}, std::pair{&out[0], "output Y"}})
    if (t->shape != cfg_.input || t->dtype != DType::f32)
      invalid("LRN", "{} is {} {}, expected f32 {}", name, to_string(t->dtype), t->shape.str(), cfg_.input.str());
  const int64_t N = cfg_.input[0], C = cfg_.input[1], spatial = cfg_.input.numel() / (N * C);
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(C), cl_long(spatial), cl_int(cfg_.size), cfg_.alpha, cfg_.beta, cfg_.bias, in[0].buffer,
           cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(spatial), size_t(N * C)), cl::NullRange, "lrn");
}

void fold_batch_norm(std::span<float> weight, std::span<float> bias, std::span<const float> scale,
                     std::span<const float> b, std::span<const float> mean, std::span<const float> var, float eps) {
  const size_t C = scale.size();
  if (C == 0 || b.size() != C || mean.size() != C || var.size() != C || bias.size() != C)
    invalid("BatchNormalization", "folding needs scale, B, mean, var and bias of one length, got {}, {}, {}, {}, {}", C,
            b.size(), mean.size(), var.size(), bias.size());
  if (weight.size() % C)
    invalid("BatchNormalization", "folding: weight of {} elements is not {} output-channel rows", weight.size(), C);
  const size_t row = weight.size() / C;
  for (size_t c = 0; c < C; ++c) {
    const double k = double(scale[c]) / std::sqrt(double(var[c]) + eps);
    for (size_t i = 0; i < row; ++i) weight[c * row + i] = float(weight[c * row + i] * k);
    bias[c] = float((double(bias[c]) - mean[c]) * k + b[c]);
  }
}

// ---------------------------------------------------------------- LpNormalization, MeanVarianceNormalization
Shape AxesNorm::validate(const AxesNormConfig& c) {
  const char* op = c.kind == AxesNormKind::mean_variance ? "MeanVarianceNormalization" : "LpNormalization";
  for (auto d : c.input.dims)
    if (d < 0) invalid(op, "input X has a negative dimension in shape {}", c.input.str());
  if (c.kind != AxesNormKind::mean_variance && c.axes.size() != 1)
    invalid(op, "normalizes along one axis, got {}", c.axes.size());
  std::vector<bool> seen(c.input.rank());
  for (auto a : c.axes) {
    const int ax = normalize_axis(op, "axes", a, c.input.rank());
    if (seen[size_t(ax)]) invalid(op, "axis {} is listed twice", a);
    seen[size_t(ax)] = true;
  }
  return c.input;
}

std::unique_ptr<AxesNorm> AxesNorm::create(Context& ctx, int device, const AxesNormConfig& cfg) {
  std::unique_ptr<AxesNorm> a(new AxesNorm());
  a->cfg_ = cfg;
  validate(cfg);
  std::vector<bool> red(cfg.input.rank());
  for (auto ax : cfg.axes) red[size_t(normalize_axis(a->type(), "axes", ax, cfg.input.rank()))] = true;
  const auto st = contiguous_strides(cfg.input);
  std::vector<int64_t> kd, ks, rd, rs;
  for (size_t i = 0; i < cfg.input.rank(); ++i) {
    (red[i] ? rd : kd).push_back(cfg.input[i]);
    (red[i] ? rs : ks).push_back(st[i]);
  }
  const Iteration keep = collapse(a->type(), kd, {ks}), reduce = collapse(a->type(), rd, {rs});
  a->keep_rank_ = keep.rank;
  a->keep_dims_ = keep.dims8();
  a->keep_strides_ = keep.strides8(0);
  a->red_rank_ = reduce.rank;
  a->red_dims_ = reduce.dims8();
  a->red_strides_ = reduce.strides8(0);
  a->groups_ = keep.inner() * keep.outer();
  a->count_ = reduce.inner() * reduce.outer();
  a->kernel_ = make_kernel(ctx.program("norm.cl", "-DACT=0", device), "normalize_axes");
  return a;
}

void AxesNorm::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  const std::string_view op = type();
  if (in.size() != 1 || out.size() != 1)
    invalid(op, "expects 1 input and 1 output, got {} and {}", in.size(), out.size());
  for (const Tensor* t : {&in[0], &out[0]})
    if (t->shape != cfg_.input || t->dtype != DType::f32)
      invalid(op, "{} is {} {}, expected f32 {}", t == &in[0] ? "input X" : "output Y", to_string(t->dtype),
              t->shape.str(), cfg_.input.str());
  if (cfg_.input.numel() == 0) return;
  const int mode = cfg_.kind == AxesNormKind::l1 ? 1 : cfg_.kind == AxesNormKind::l2 ? 2 : 0;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(mode), cl_int(keep_rank_), keep_dims_, keep_strides_, cl_int(red_rank_), red_dims_,
           red_strides_, cl_long(count_), in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(groups_)), cl::NullRange, "normalize_axes");
}

}  // namespace cldl
