// GEMM, the workhorse: C[b] = act(alpha * op(A[b]) * op(B[b]) + beta * C[b] + bias), row-major,
// batched and strided-batched. Providers: cldl's own kernel (kernels/gemm.cl) or CLBlast.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "layers/activation.hpp"
#include "layers/op.hpp"

namespace cldl {

enum class GemmProvider { automatic, own, clblast };
enum class GemmBias { none, per_col /* length N: dense layers */, per_row /* length M: conv as GEMM */ };

struct GemmConfig {
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false;  // A stored K x M (row-major) when true, else M x K
  bool trans_b = false;  // B stored N x K when true, else K x N
  int64_t lda = 0, ldb = 0, ldc = 0;  // leading dimensions (elements); 0 = packed
  int64_t batch = 1;
  // Elements between batch items; -1 = packed (rows * ld), 0 = the same matrix for every item.
  int64_t stride_a = -1, stride_b = -1, stride_c = -1;
  float alpha = 1.0f, beta = 0.0f;
  GemmBias bias = GemmBias::none;
  Activation act;
  GemmProvider provider = GemmProvider::automatic;

  int64_t eff_lda() const { return lda ? lda : (trans_a ? M : K); }
  int64_t eff_ldb() const { return ldb ? ldb : (trans_b ? K : N); }
  int64_t eff_ldc() const { return ldc ? ldc : N; }
  int64_t eff_stride_a() const { return stride_a >= 0 ? stride_a : (trans_a ? K : M) * eff_lda(); }
  int64_t eff_stride_b() const { return stride_b >= 0 ? stride_b : (trans_b ? N : K) * eff_ldb(); }
  int64_t eff_stride_c() const { return stride_c >= 0 ? stride_c : M * eff_ldc(); }
  double flops() const { return 2.0 * double(M) * double(N) * double(K) * double(batch); }
};

// Inputs: A, B, [bias]; output: C (read too when beta != 0). Each tensor is used from its view offset
// with the config's leading dimensions and strides; shapes are checked only for element counts.
class Gemm : public Op {
 public:
  static void validate(const GemmConfig& cfg);
  static std::unique_ptr<Gemm> create(Context& ctx, int device, const GemmConfig& cfg);
  std::string_view type() const override { return "Gemm"; }
  std::string algorithm() const override { return algorithm_; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;
  // Convenience form.
  void run(const Tensor& a, const Tensor& b, const Tensor& c, ExecutionContext& ec, const Tensor* bias = nullptr);
  const GemmConfig& config() const { return cfg_; }

 private:
  Gemm(Context& ctx, int device, GemmConfig cfg);
  Context* ctx_;
  int device_;
  GemmConfig cfg_;
  std::string algorithm_;
  cl::Kernel kernel_;
  size_t tile_m_ = 1, tile_n_ = 1;
};

}  // namespace cldl
