// Softmax / LogSoftmax: axis handling, algorithm choice (row reduction or strided column walk), enqueue.
#include "layers/softmax.hpp"

#include "layers/strided.hpp"
#include "runtime/log.hpp"

namespace cldl {

namespace {
const ProgramVariants kSoftmaxVariants("softmax.cl", {""});
}

Shape Softmax::validate(const SoftmaxConfig& c) {
  const char* op = c.log ? "LogSoftmax" : "Softmax";
  if (c.input.rank() == 0) invalid(op, "input must have rank >= 1, got a scalar");
  for (auto d : c.input.dims)
    if (d < 0) invalid(op, "input has a negative dimension in shape {}", c.input.str());
  normalize_axis(op, "axis", c.axis, c.input.rank());
  return c.input;
}

std::unique_ptr<Softmax> Softmax::create(Context& ctx, int device, const SoftmaxConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Softmax> s(new Softmax());
  s->cfg_ = cfg;
  const int ax = normalize_axis("Softmax", "axis", cfg.axis, cfg.input.rank());
  for (int i = 0; i < ax; ++i) s->outer_ *= cfg.input[i];
  s->len_ = cfg.input[ax];
  for (size_t i = ax + 1; i < cfg.input.rank(); ++i) s->inner_ *= cfg.input[i];
  cl::Program prog = ctx.program("softmax.cl", "", device);
  if (s->inner_ == 1) {
    s->kernel_ = make_kernel(prog, "softmax_rows");
    s->group_ = reduction_group_size(s->kernel_, ctx.device(device), 128);
    s->algorithm_ = fmt::format("rows: work-group of {} per row", s->group_);
  } else {
    s->kernel_ = make_kernel(prog, "softmax_strided");
    s->algorithm_ = "strided: work-item per column";
  }
  log::debug("{} {} axis {}: {}", s->type(), cfg.input.str(), ax, s->algorithm_);
  return s;
}

void Softmax::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  if (in.size() != 1 || out.size() != 1)
    invalid(type(), "expects 1 input and 1 output, got {} and {}", in.size(), out.size());
  for (const Tensor* t : {&in[0], &out[0]})
    if (t->shape != cfg_.input || t->dtype != DType::f32)
      invalid(type(), "{} is {} {}, expected f32 {}", t == &in[0] ? "input" : "output", to_string(t->dtype),
              t->shape.str(), cfg_.input.str());
  if (cfg_.input.numel() == 0) return;
  std::lock_guard lock(launch_mutex_);
  if (inner_ == 1) {
    set_args(kernel_, cl_int(cfg_.log), cl_long(len_), in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
             cl_long(out[0].offset_elems()), cl::Local(group_ * sizeof(float)));
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(outer_) * group_), cl::NDRange(group_), "softmax_rows");
  } else {
    set_args(kernel_, cl_int(cfg_.log), cl_long(len_), cl_long(inner_), in[0].buffer, cl_long(in[0].offset_elems()),
             out[0].buffer, cl_long(out[0].offset_elems()));
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(inner_), size_t(outer_)), cl::NullRange, "softmax_strided");
  }
}

}  // namespace cldl
