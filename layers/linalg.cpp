// Det: shape rules and the kernel arguments of kernels/linalg.cl.
#include "layers/linalg.hpp"

namespace cldl {

namespace {
const ProgramVariants kLinalgVariants("linalg.cl", {"-DT=float -DUSE_FP64=0"});
}  // namespace

Shape Det::validate(const DetConfig& c) {
  if (c.dtype != DType::f32 && c.dtype != DType::f64)
    invalid("Det", "input dtype {} is not supported (f32, f64)", to_string(c.dtype));
  const size_t r = c.input.rank();
  if (r < 2 || c.input[r - 1] != c.input[r - 2])
    invalid("Det", "input must be [..., n, n] (square matrices), got shape {}", c.input.str());
  return Shape(std::vector<int64_t>(c.input.dims.begin(), c.input.dims.end() - 2));
}

std::unique_ptr<Det> Det::create(Context& ctx, int device, const DetConfig& cfg) {
  std::unique_ptr<Det> d(new Det());
  d->cfg_ = cfg;
  d->out_ = validate(cfg);
  check_dtype_support(ctx.device(device), cfg.dtype, "Det");
  const bool f64 = cfg.dtype == DType::f64;
  d->kernel_ =
      make_kernel(ctx.program("linalg.cl", f64 ? "-DT=double -DUSE_FP64=1" : "-DT=float -DUSE_FP64=0", device), "det");
  return d;
}

size_t Det::workspace_bytes() const { return size_t(cfg_.input.numel()) * dtype_size(cfg_.dtype); }

void Det::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* ws, ExecutionContext& ec) {
  if (in.size() != 1 || out.size() != 1)
    invalid("Det", "expects 1 input and 1 output, got {} and {}", in.size(), out.size());
  if (in[0].shape != cfg_.input || in[0].dtype != cfg_.dtype)
    invalid("Det", "input is {} {}, expected {} {}", to_string(in[0].dtype), in[0].shape.str(), to_string(cfg_.dtype),
            cfg_.input.str());
  if (out[0].shape != out_ || out[0].dtype != cfg_.dtype)
    invalid("Det", "output is {} {}, expected {} {}", to_string(out[0].dtype), out[0].shape.str(),
            to_string(cfg_.dtype), out_.str());
  const int64_t batch = out_.numel(), n = cfg_.input[cfg_.input.rank() - 1];
  if (batch == 0) return;
  if (!ws || ws->bytes() < workspace_bytes())
    invalid("Det", "needs a workspace of {} bytes, got {}", workspace_bytes(), ws ? ws->bytes() : 0);
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_long(n), in[0].buffer, cl_long(in[0].offset_elems()), ws->buffer,
           cl_long(ws->offset_bytes / dtype_size(cfg_.dtype)), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(batch)), cl::NullRange, "det");
}

}  // namespace cldl
