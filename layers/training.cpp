// NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss (layers/softmax.hpp's log-softmax, then the loss kernel)
// and the optimizers Adagrad, Momentum and Adam: shape rules, attribute checks and the kernel arguments of
// kernels/training.cl.
#include "layers/training.hpp"

#include <algorithm>

#include "layers/launch.hpp"
#include "layers/softmax.hpp"

namespace cldl {

namespace {
// The builds of training.cl: targets of either integer type; the loss work-group of 64 (smaller builds only on
// devices that cap work-groups below it).
const ProgramVariants kTrainingVariants("training.cl", {"-DTARGET_T=long", "-DTARGET_T=int"});

void check_tensor(std::string_view op, std::string_view arg, const Tensor& t, const Shape& s, DType dt) {
  if (t.shape != s) invalid(op, "{} has shape {}, expected {}", arg, t.shape.str(), s.str());
  if (t.dtype != dt) invalid(op, "{} has dtype {}, expected {}", arg, to_string(t.dtype), to_string(dt));
}

size_t loss_group(const Device& dev) {
  size_t g = 64;
  while (g > 1 && g > dev.info.max_work_group_size) g /= 2;
  return g;
}

std::string loss_options(DType target, size_t group) {
  std::string o = target == DType::i32 ? "-DTARGET_T=int" : "-DTARGET_T=long";
  if (group != 64) o += fmt::format(" -DLOSS_GROUP={}", group);
  return o;
}
}  // namespace

LossReduction loss_reduction_from_onnx(std::string_view op, std::string_view name) {
  if (name == "none") return LossReduction::none;
  if (name == "sum") return LossReduction::sum;
  if (name == "mean") return LossReduction::mean;
  invalid(op, "attribute reduction must be 'none', 'sum' or 'mean', got '{}'", name);
}

// ---------------------------------------------------------------- losses
Shape Loss::validate(const LossConfig& c) {
  const std::string_view op = c.softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss";
  if (c.input.rank() < 2) invalid(op, "input must have shape [N, C] or [N, C, d1, ..., dk], got {}", c.input.str());
  for (auto d : c.input.dims)
    if (d < 0) invalid(op, "input has a negative dimension in shape {}", c.input.str());
  if (c.target != DType::i64 && c.target != DType::i32)
    invalid(op, "target must be int64 or int32, got {}", to_string(c.target));
  if (c.log_prob && !c.softmax) invalid(op, "only SoftmaxCrossEntropyLoss has the output log_prob");
  Shape target{c.input[0]};
  for (size_t i = 2; i < c.input.rank(); ++i) target.dims.push_back(c.input[i]);
  return c.reduction == LossReduction::none ? target : Shape{};
}

std::unique_ptr<Loss> Loss::create(Context& ctx, int device, const LossConfig& cfg) {
  std::unique_ptr<Loss> l(new Loss());
  l->cfg_ = cfg;
  l->out_ = validate(cfg);
  l->classes_ = cfg.input[1];
  l->count_ = cfg.input[0];
  for (size_t i = 2; i < cfg.input.rank(); ++i) l->inner_ *= cfg.input[i];
  l->count_ *= l->inner_;
  if (cfg.softmax) l->softmax_ = Softmax::create(ctx, device, SoftmaxConfig{cfg.input, 1, true});
  l->group_ = loss_group(ctx.device(device));
  // Sums: enough work-groups that each work-item adds about 32 terms, at most 256 (their pairs then add in one).
  const int64_t per_group = int64_t(l->group_) * 32;
  l->groups_ = std::clamp<int64_t>((l->count_ + per_group - 1) / per_group, 1, 256);
  const cl::Program program = ctx.program("training.cl", loss_options(cfg.target, l->group_), device);
  if (cfg.reduction == LossReduction::none) {
    l->kernel_ = make_kernel(program, "loss_none");
  } else {
    l->kernel_ = make_kernel(program, "loss_partial");
    l->finish_ = make_kernel(program, "loss_finish");
  }
  return l;
}

Loss::~Loss() = default;

std::string Loss::algorithm() const {
  const std::string how =
      cfg_.reduction == LossReduction::none
          ? std::string("one work-item per position")
          : fmt::format("{} work-group{} of {}, then one adds their sums", groups_, groups_ == 1 ? "" : "s", group_);
  return softmax_ ? fmt::format("log-softmax ({}), then {}", softmax_->algorithm(), how) : how;
}

// The log-probabilities (SoftmaxCrossEntropyLoss without its log_prob output), then the sums' (loss, weight) pairs.
size_t Loss::log_prob_elems() const { return softmax_ && !cfg_.log_prob ? size_t(cfg_.input.numel()) : 0; }

size_t Loss::workspace_bytes() const {
  const size_t pairs = cfg_.reduction == LossReduction::none ? 0 : 2 * size_t(groups_);
  return (log_prob_elems() + pairs) * sizeof(float);
}

void Loss::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* workspace,
                   ExecutionContext& ec) {
  const std::string_view op = type();
  const size_t n_in = cfg_.weight ? 3 : 2, n_out = cfg_.log_prob ? 2 : 1;
  if (in.size() != n_in || out.size() != n_out)
    invalid(op, "expects {} inputs and {} outputs, got {} and {}", n_in, n_out, in.size(), out.size());
  check_tensor(op, "input", in[0], cfg_.input, DType::f32);
  Shape target{cfg_.input[0]};
  for (size_t i = 2; i < cfg_.input.rank(); ++i) target.dims.push_back(cfg_.input[i]);
  check_tensor(op, "target", in[1], target, cfg_.target);
  if (cfg_.weight) check_tensor(op, "weight", in[2], Shape{classes_}, DType::f32);
  check_tensor(op, "output loss", out[0], out_, DType::f32);
  if (cfg_.log_prob) check_tensor(op, "output log_prob", out[1], cfg_.input, DType::f32);
  if (workspace_bytes() && (!workspace || workspace->bytes() < workspace_bytes()))
    invalid(op, "needs a workspace of {} bytes", workspace_bytes());
  // The log-probabilities the loss reads: the input itself, or the log-softmax of it.
  Tensor lp = in[0];
  if (softmax_) {
    lp = cfg_.log_prob ? out[1] : workspace->slice_elems(0, cfg_.input.numel(), cfg_.input);
    if (cfg_.input.numel() > 0) softmax_->enqueue({&in[0], 1}, {&lp, 1}, nullptr, ec);
  }
  if (out_.numel() == 0) return;
  const Tensor& w = cfg_.weight ? in[2] : in[0];  // without weights the kernel reads none: any buffer
  const int has_ignore = cfg_.ignore_index ? 1 : 0;
  const cl_long ignore = cfg_.ignore_index.value_or(0);
  std::lock_guard lock(launch_mutex_);
  if (cfg_.reduction == LossReduction::none) {
    set_args(kernel_, cl_long(classes_), cl_long(inner_), cl_int(has_ignore), ignore, cl_int(cfg_.weight), lp.buffer,
             cl_long(lp.offset_elems()), in[1].buffer, cl_long(in[1].offset_elems()), w.buffer,
             cl_long(w.offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(count_)), cl::NullRange, "loss_none");
    return;
  }
  const cl_long part_off = cl_long(workspace->offset_elems() + log_prob_elems());
  set_args(kernel_, cl_long(count_), cl_long(classes_), cl_long(inner_), cl_int(has_ignore), ignore,
           cl_int(cfg_.weight), lp.buffer, cl_long(lp.offset_elems()), in[1].buffer, cl_long(in[1].offset_elems()),
           w.buffer, cl_long(w.offset_elems()), workspace->buffer, part_off);
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(groups_) * group_), cl::NDRange(group_), "loss_partial");
  set_args(finish_, cl_int(groups_), cl_int(cfg_.reduction == LossReduction::mean), workspace->buffer, part_off,
           out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(finish_, cl::NDRange(group_), cl::NDRange(group_), "loss_finish");
}

// ---------------------------------------------------------------- optimizers
namespace {
std::string_view optimizer_name(OptimizerKind k) {
  return k == OptimizerKind::adagrad ? "Adagrad" : k == OptimizerKind::adam ? "Adam" : "Momentum";
}
}  // namespace

std::string_view Optimizer::type() const { return optimizer_name(cfg_.kind); }

void Optimizer::validate(const OptimizerConfig& c) {
  const std::string_view op = optimizer_name(c.kind);
  if (c.tensors.empty()) invalid(op, "needs at least one tensor to optimize");
  for (auto& s : c.tensors)
    for (auto d : s.dims)
      if (d < 0) invalid(op, "a tensor to optimize has a negative dimension in shape {}", s.str());
}

std::unique_ptr<Optimizer> Optimizer::create(Context& ctx, int device, const OptimizerConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Optimizer> o(new Optimizer());
  o->cfg_ = cfg;
  const char* name = cfg.kind == OptimizerKind::adagrad ? "adagrad"
                     : cfg.kind == OptimizerKind::adam  ? "adam"
                                                        : "momentum";
  o->kernel_ = make_kernel(ctx.program("training.cl", "-DTARGET_T=long", device), name);
  // A local size of its own (the items past the end return): Adam's rate is computed once per group, and the
  // driver's pick for a prime element count would be groups of one.
  o->group_ = fixed_group_items(o->kernel_, ctx.device(device));
  return o;
}

void Optimizer::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  const std::string_view op = type();
  const size_t n = cfg_.tensors.size(), s = states(cfg_.kind);
  if (in.size() != 2 + n * (1 + 1 + s) || out.size() != n * (1 + s))
    invalid(op, "expects {} inputs and {} outputs for {} tensors, got {} and {}", 2 + n * (2 + s), n * (1 + s), n,
            in.size(), out.size());
  check_tensor(op, "input R", in[0], in[0].shape, DType::f32);
  check_tensor(op, "input T", in[1], in[1].shape, DType::i64);
  if (in[0].numel() != 1 || in[1].numel() != 1)
    invalid(op, "inputs R and T must hold one value each, got shapes {} and {}", in[0].shape.str(), in[1].shape.str());
  const char* state_names[2][2] = {{"H", "V"}, {"V", "H"}};  // [adam][state]
  for (size_t i = 0; i < n; ++i) {
    const Shape& sh = cfg_.tensors[i];
    check_tensor(op, fmt::format("input X_{}", i + 1), in[2 + i], sh, DType::f32);
    check_tensor(op, fmt::format("input G_{}", i + 1), in[2 + n + i], sh, DType::f32);
    for (size_t k = 0; k < s; ++k) {
      const char* nm = cfg_.kind == OptimizerKind::adam      ? state_names[1][k]
                       : cfg_.kind == OptimizerKind::adagrad ? "H"
                                                             : "V";
      check_tensor(op, fmt::format("input {}_{}", nm, i + 1), in[2 + (2 + k) * n + i], sh, DType::f32);
      check_tensor(op, fmt::format("output {}_{}_new", nm, i + 1), out[(1 + k) * n + i], sh, DType::f32);
    }
    check_tensor(op, fmt::format("output X_{}_new", i + 1), out[i], sh, DType::f32);
  }
  // ceil(n / kSlots) launches (kernels/training.cl: OPT_SLOTS tensors each); unused slots repeat slot 0 with 0
  // elements.
  constexpr size_t kSlots = 8;
  const size_t bufs = cfg_.kind == OptimizerKind::adam ? 7 : 5;
  // Per tensor, its buffers in the kernel's slot order: X, G, state 1, X', state 1' (then state 2, state 2').
  auto slot_tensors = [&](size_t i) {
    std::vector<const Tensor*> t{&in[2 + i], &in[2 + n + i], &in[2 + 2 * n + i], &out[i], &out[n + i]};
    if (bufs == 7) t.insert(t.end(), {&in[2 + 3 * n + i], &out[2 * n + i]});
    return t;
  };
  std::lock_guard lock(launch_mutex_);
  for (size_t first = 0; first < n; first += kSlots) {
    cl_uint a = 0;
    auto arg = [&](const auto& v) { detail::check_arg(kernel_.setArg(a, v), kernel_, a), ++a; };
    switch (cfg_.kind) {
      case OptimizerKind::adagrad:
        arg(cl_float(cfg_.decay_factor)), arg(cl_float(cfg_.epsilon)), arg(cl_float(cfg_.norm_coefficient));
        break;
      case OptimizerKind::momentum:
      case OptimizerKind::nesterov:
        arg(cl_int(cfg_.kind == OptimizerKind::nesterov)), arg(cl_float(cfg_.alpha)), arg(cl_float(cfg_.beta));
        arg(cl_float(cfg_.norm_coefficient));
        break;
      case OptimizerKind::adam:
        arg(cl_float(cfg_.alpha)), arg(cl_float(cfg_.beta)), arg(cl_float(cfg_.epsilon));
        arg(cl_float(cfg_.norm_coefficient)), arg(cl_float(cfg_.norm_coefficient_post));
        arg(cl_float(cfg_.decoupled_weight_decay));
        break;
    }
    arg(in[0].buffer), arg(cl_long(in[0].offset_elems())), arg(in[1].buffer), arg(cl_long(in[1].offset_elems()));
    size_t items = 0;
    for (size_t k = 0; k < kSlots; ++k) {
      const bool used = first + k < n;
      const auto t = slot_tensors(used ? first + k : first);
      for (size_t b = 0; b < bufs; ++b) {
        arg(t[b]->buffer), arg(cl_long(t[b]->offset_elems()));
        if (b == 4) {
          const int64_t count = used ? cfg_.tensors[first + k].numel() : 0;
          arg(cl_long(count));
          items += size_t(count);
        }
      }
    }
    if (items) ec.enqueue_kernel(kernel_, cl::NDRange(round_up(items, group_)), cl::NDRange(group_), "optimizer");
  }
}

}  // namespace cldl
