// Reference GEMM: the textbook triple loop in double precision, one output at a time.
#include "tests/reference/gemm_ref.hpp"

namespace cldl::ref {

void gemm(const GemmConfig& cfg, const float* a, const float* b, float* c, const float* bias) {
  const int64_t lda = cfg.eff_lda(), ldb = cfg.eff_ldb(), ldc = cfg.eff_ldc();
  for (int64_t t = 0; t < cfg.batch; ++t) {
    const float* A = a + t * cfg.eff_stride_a();
    const float* B = b + t * cfg.eff_stride_b();
    float* C = c + t * cfg.eff_stride_c();
    for (int64_t m = 0; m < cfg.M; ++m)
      for (int64_t n = 0; n < cfg.N; ++n) {
        double acc = 0.0;
        for (int64_t k = 0; k < cfg.K; ++k) {
          double x = cfg.trans_a ? A[k * lda + m] : A[m * lda + k];
          double y = cfg.trans_b ? B[n * ldb + k] : B[k * ldb + n];
          acc += x * y;
        }
        double v = double(cfg.alpha) * acc;
        if (cfg.beta != 0.0f) v += double(cfg.beta) * C[m * ldc + n];
        if (cfg.bias == GemmBias::per_col) v += bias[n];
        if (cfg.bias == GemmBias::per_row) v += bias[m];
        C[m * ldc + n] = apply(cfg.act, float(v));
      }
  }
}

}  // namespace cldl::ref
