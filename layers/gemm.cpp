// Gemm op: validation, provider choice and enqueue.
#include "layers/gemm.hpp"

#include "runtime/log.hpp"

namespace cldl {

namespace {
// Variants built by `cldl compile` / warm-up: plain, and the dense-layer epilogues.
const ProgramVariants kGemmVariants("gemm.cl", {"-DTRANS_A=0 -DTRANS_B=0 -DBIAS=0 -DACT=0",
                                                "-DTRANS_A=0 -DTRANS_B=1 -DBIAS=1 -DACT=0",
                                                "-DTRANS_A=0 -DTRANS_B=0 -DBIAS=1 -DACT=1"});
}  // namespace

void Gemm::validate(const GemmConfig& c) {
  if (c.M <= 0) invalid("Gemm", "M must be positive, got {}", c.M);
  if (c.N <= 0) invalid("Gemm", "N must be positive, got {}", c.N);
  if (c.K <= 0) invalid("Gemm", "K must be positive, got {}", c.K);
  if (c.batch <= 0) invalid("Gemm", "batch must be positive, got {}", c.batch);
  if (c.eff_lda() < (c.trans_a ? c.M : c.K)) invalid("Gemm", "lda {} is smaller than the rows of op(A)", c.lda);
  if (c.eff_ldb() < (c.trans_b ? c.K : c.N)) invalid("Gemm", "ldb {} is smaller than the rows of op(B)", c.ldb);
  if (c.eff_ldc() < c.N) invalid("Gemm", "ldc {} is smaller than N = {}", c.ldc, c.N);
  const int64_t lim = int64_t(1) << 31;
  if (c.M >= lim || c.N >= lim || c.K >= lim) invalid("Gemm", "dimensions above 2^31 are not supported");
}

Gemm::Gemm(Context& ctx, int device, GemmConfig cfg) : ctx_(&ctx), device_(device), cfg_(std::move(cfg)) {}

std::unique_ptr<Gemm> Gemm::create(Context& ctx, int device, const GemmConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Gemm> g(new Gemm(ctx, device, cfg));
  std::string opts = fmt::format("-DTRANS_A={} -DTRANS_B={} -DBIAS={} -DACT={}", int(cfg.trans_a), int(cfg.trans_b),
                                 int(cfg.bias), int(cfg.act.kind));
  g->kernel_ = make_kernel(ctx.program("gemm.cl", opts, device), "gemm_simple");
  g->algorithm_ = "own:simple";
  log::debug("Gemm {}x{}x{} batch {}: {}", cfg.M, cfg.N, cfg.K, cfg.batch, g->algorithm_);
  return g;
}

void Gemm::run(const Tensor& a, const Tensor& b, const Tensor& c, ExecutionContext& ec, const Tensor* bias) {
  std::vector<Tensor> in{a, b};
  if (bias) in.push_back(*bias);
  Tensor out[1] = {c};
  enqueue(in, out, nullptr, ec);
}

void Gemm::enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor*,
                   ExecutionContext& ec) {
  const auto& c = cfg_;
  size_t need_in = c.bias == GemmBias::none ? 2 : 3;
  if (inputs.size() != need_in || outputs.size() != 1)
    invalid("Gemm", "expects {} inputs and 1 output, got {} and {}", need_in, inputs.size(), outputs.size());
  const Tensor &A = inputs[0], &B = inputs[1], &C = outputs[0];
  for (const Tensor* t : {&A, &B, &C})
    if (t->dtype != DType::f32) invalid("Gemm", "only f32 tensors are supported, got {}", to_string(t->dtype));
  const Tensor& bias = need_in == 3 ? inputs[2] : C;
  std::lock_guard lock(launch_mutex_);
  cl::Kernel& k = kernel_;
  set_args(k, cl_int(c.M), cl_int(c.N), cl_int(c.K), A.buffer, cl_long(A.offset_elems()), cl_int(c.eff_lda()),
           cl_long(c.eff_stride_a()), B.buffer, cl_long(B.offset_elems()), cl_int(c.eff_ldb()),
           cl_long(c.eff_stride_b()), C.buffer, cl_long(C.offset_elems()), cl_int(c.eff_ldc()),
           cl_long(c.eff_stride_c()), c.alpha, c.beta, bias.buffer, cl_long(bias.offset_elems()), c.act.alpha,
           c.act.beta);
  ec.enqueue_kernel(k, cl::NDRange(c.N, c.M, c.batch), cl::NullRange, "gemm");
}

}  // namespace cldl
