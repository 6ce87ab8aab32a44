// DynamicQuantizeLinear: the range kernel's work-group size and the two launches (kernels/quant.cl).
#include "layers/dynamic_quant.hpp"

#include <algorithm>

namespace cldl {

Shape DynamicQuantizeLinear::validate(const DynamicQuantizeConfig& c) {
  for (auto d : c.input.dims)
    if (d < 0) invalid("DynamicQuantizeLinear", "input shape {} has a negative dimension", c.input.str());
  return c.input;
}

std::unique_ptr<DynamicQuantizeLinear> DynamicQuantizeLinear::create(Context& ctx, int device,
                                                                     const DynamicQuantizeConfig& cfg) {
  validate(cfg);
  std::unique_ptr<DynamicQuantizeLinear> q(new DynamicQuantizeLinear());
  q->cfg_ = cfg;
  cl::Program prog = ctx.program("quant.cl", "-DQTILE=16", device);  // the build QuantizeLinear uses
  q->partial_ = make_kernel(prog, "dynamic_quant_partial");
  q->range_ = make_kernel(prog, "dynamic_quant_range");
  // Up to 1024 chunks of at least 256 elements: enough work-items for every core, few values left.
  const int64_t n = cfg.input.numel();
  q->parts_ = std::clamp<int64_t>((n + 255) / 256, 1, 1024);
  q->chunk_ = std::max<int64_t>((n + q->parts_ - 1) / q->parts_, 1);
  q->apply_ = make_kernel(prog, "dynamic_quant_apply");
  // The largest power of two up to 256 that the device allows for the range kernel.
  const size_t most = q->range_.getWorkGroupInfo<CL_KERNEL_WORK_GROUP_SIZE>(ctx.device(device).device);
  q->group_ = 1;
  while (q->group_ * 2 <= std::min<size_t>(most, 256)) q->group_ *= 2;
  return q;
}

void DynamicQuantizeLinear::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* ws,
                                    ExecutionContext& ec) {
  constexpr std::string_view op = "DynamicQuantizeLinear";
  if (in.size() != 1 || out.size() != 3)
    invalid(op, "expects 1 input and 3 outputs, got {} and {}", in.size(), out.size());
  auto check = [&](const Tensor& t, const char* what, const Shape& s, DType dt) {
    if (t.shape != s || t.dtype != dt)
      invalid(op, "{} is {} {}, expected {} {}", what, to_string(t.dtype), t.shape.str(), to_string(dt), s.str());
  };
  check(in[0], "input x", cfg_.input, DType::f32);
  check(out[0], "output y", cfg_.input, DType::u8);
  check(out[1], "output y_scale", Shape{}, DType::f32);
  check(out[2], "output y_zero_point", Shape{}, DType::u8);
  const int64_t n = cfg_.input.numel();
  if (!ws || ws->bytes() < workspace_bytes())
    invalid(op, "needs a workspace of {} bytes, got {}", workspace_bytes(), ws ? ws->bytes() : 0);
  const cl_long w_off = cl_long(ws->offset_bytes / sizeof(float));
  std::lock_guard lock(launch_mutex_);
  set_args(partial_, cl_long(n), cl_long(chunk_), in[0].buffer, cl_long(in[0].offset_elems()), ws->buffer, w_off);
  ec.enqueue_kernel(partial_, cl::NDRange(size_t(parts_)), cl::NullRange, "dynamic_quant_partial");
  set_args(range_, cl_long(2 * parts_), ws->buffer, w_off, out[1].buffer, cl_long(out[1].offset_elems()), out[2].buffer,
           cl_long(out[2].offset_elems()), cl::Local(group_ * sizeof(cl_float)), cl::Local(group_ * sizeof(cl_float)));
  ec.enqueue_kernel(range_, cl::NDRange(group_), cl::NDRange(group_), "dynamic_quant_range");
  if (n == 0) return;
  set_args(apply_, cl_long(n), in[0].buffer, cl_long(in[0].offset_elems()), out[1].buffer,
           cl_long(out[1].offset_elems()), out[2].buffer, cl_long(out[2].offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(apply_, cl::NDRange(size_t(n)), cl::NullRange, "dynamic_quant_apply");
}

}  // namespace cldl
