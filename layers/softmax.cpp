// Softmax / LogSoftmax: axis handling, algorithm choice (serial rows, work-group rows or strided column walk),
// enqueue.
#include "layers/softmax.hpp"

#include <algorithm>

#include "layers/strided.hpp"
#include "runtime/log.hpp"

namespace cldl {

namespace {
const ProgramVariants kSoftmaxVariants("softmax.cl", {""});
// Serial rows on a CPU: the rows are split into this many chunks per compute unit (one work-item each),
// enough for the runtime to balance its threads, few enough that per-group costs stay small.
constexpr int64_t kSerialChunksPerUnit = 4;
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
  const Device& dev = ctx.device(device);
  const bool serial =
      cfg.rows == SoftmaxRows::serial || (cfg.rows == SoftmaxRows::automatic && dev.info.type == DeviceType::cpu);
  if (s->inner_ == 1 && serial) {
    // A CPU runtime runs a work-group on one core and pays for each barrier, so a work-group per row
    // spends more on its reductions than on the row (PoCL, [4,4,64,64]: 3.5 ms). Whole rows per
    // work-item, a few chunks per compute unit for balance: 1 item per group, no barriers.
    s->kernel_ = make_kernel(prog, "softmax_rows_serial");
    const int64_t chunks = int64_t(std::max<uint32_t>(dev.info.compute_units, 1)) * kSerialChunksPerUnit;
    s->rows_per_item_ = std::max<int64_t>(1, (s->outer_ + chunks - 1) / chunks);
    s->items_ = (s->outer_ + s->rows_per_item_ - 1) / s->rows_per_item_;
    s->serial_ = true;
    s->algorithm_ = fmt::format("rows serial: {} rows per work-item, {} work-items", s->rows_per_item_, s->items_);
  } else if (s->inner_ == 1) {
    // GPUs: a work-group per row, no wider than the row (a 64-long row leaves no item idle).
    s->kernel_ = make_kernel(prog, "softmax_rows");
    s->group_ = reduction_group_size(s->kernel_, dev, 128);
    while (s->group_ > 1 && int64_t(s->group_ / 2) >= s->len_) s->group_ /= 2;
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
  if (serial_) {
    set_args(kernel_, cl_int(cfg_.log), cl_long(len_), cl_long(outer_), cl_long(rows_per_item_), in[0].buffer,
             cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(items_)), cl::NDRange(1), "softmax_rows_serial");
  } else if (inner_ == 1) {
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
