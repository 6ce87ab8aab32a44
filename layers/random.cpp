// Bernoulli: the output kind codes and the kernel arguments of kernels/random.cl.
#include "layers/random.hpp"

namespace cldl {

namespace {
const ProgramVariants kRandomVariants("random.cl", {"-DT_P=float -DUSE_FP64=0"});

// OUT_KIND of kernels/random.cl: 0 f32, 1 f64, 2 f16, 3 bf16, 4 integer / bool; -1 unsupported.
int out_kind(DType t) {
  switch (t) {
    case DType::f32:
      return 0;
    case DType::f64:
      return 1;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 3;
    case DType::boolean:
    case DType::i8:
    case DType::u8:
    case DType::i16:
    case DType::u16:
    case DType::i32:
    case DType::u32:
    case DType::i64:
    case DType::u64:
      return 4;
    default:
      return -1;
  }
}
}  // namespace

Shape Bernoulli::validate(const BernoulliConfig& c) {
  if (c.dtype != DType::f32 && c.dtype != DType::f64)
    invalid("Bernoulli", "input dtype {} is not supported (f32, f64)", to_string(c.dtype));
  if (out_kind(c.out_dtype) < 0)
    invalid("Bernoulli", "output dtype {} is not supported (f32, f64, f16, bf16, integers, bool)",
            to_string(c.out_dtype));
  return c.input;
}

std::unique_ptr<Bernoulli> Bernoulli::create(Context& ctx, int device, const BernoulliConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Bernoulli> b(new Bernoulli());
  b->cfg_ = cfg;
  for (DType t : {cfg.dtype, cfg.out_dtype}) check_dtype_support(ctx.device(device), t, "Bernoulli");
  const bool f64 = cfg.dtype == DType::f64 || cfg.out_dtype == DType::f64;
  b->kernel_ = make_kernel(
      ctx.program("random.cl",
                  fmt::format("-DT_P={} -DUSE_FP64={}", cfg.dtype == DType::f64 ? "double" : "float", int(f64)),
                  device),
      "bernoulli");
  return b;
}

void Bernoulli::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  if (in.size() != 1 || out.size() != 1)
    invalid("Bernoulli", "expects 1 input and 1 output, got {} and {}", in.size(), out.size());
  if (in[0].shape != cfg_.input || in[0].dtype != cfg_.dtype)
    invalid("Bernoulli", "input is {} {}, expected {} {}", to_string(in[0].dtype), in[0].shape.str(),
            to_string(cfg_.dtype), cfg_.input.str());
  if (out[0].shape != cfg_.input || out[0].dtype != cfg_.out_dtype)
    invalid("Bernoulli", "output is {} {}, expected {} {}", to_string(out[0].dtype), out[0].shape.str(),
            to_string(cfg_.out_dtype), cfg_.input.str());
  const int64_t n = cfg_.input.numel();
  if (n == 0) return;
  const uint64_t stream = stream_.fetch_add(1);
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_ulong(cfg_.seed), cl_ulong(stream), cl_long(n), in[0].buffer, cl_long(in[0].offset_elems()),
           cl_int(out_kind(cfg_.out_dtype)), cl_int(dtype_size(cfg_.out_dtype)), out[0].buffer,
           cl_long(out[0].offset_bytes / dtype_size(cfg_.out_dtype)));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(n)), cl::NullRange, "bernoulli");
}

}  // namespace cldl
