// GEMM, the workhorse: C[b] = act(alpha * op(A[b]) * op(B[b]) + beta * C[b] + bias + R[b]), row-major,
// batched and strided-batched (R: an optional residual in C's layout). Providers: cldl's own kernel (kernels/gemm.cl) or CLBlast.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "layers/activation.hpp"
#include "layers/op.hpp"

namespace cldl {

enum class GemmProvider { automatic, own, clblast };
enum class GemmBias { none, per_col /* length N: dense layers */, per_row /* length M: conv as GEMM */ };

// Parameters of the own kernel (kernels/gemm.cl, gemm_tile); 0 / -1 = chosen by Gemm::create for the
// device. Exposed for `cldl bench` / tuning; every combination is correct.
struct GemmOwnParams {
  int mr = 0;        // rows of C per work-item (register block), 1..8
  int nr = 0;        // vector width = columns of a B panel: 4, 8 or 16
  int nc = 0;        // vectors of nr columns per work-item (adjacent panels), 1..4: an mr x (nc * nr) block
  int pack_b = -1;   // 1: copy op(B) into NR-wide panels in the workspace first; 0: read B in place
  int pack_a = -1;   // 1: copy op(A) into MR-tall panels in the workspace first; 0: read A in place
  int mt = 0;        // row blocks per work-item (more work per work-group when K is small)
  int local = 0;     // work-group size along M (1 on CPUs, where each work-group runs on one thread)
  int gemv = -1;     // 1: the vector-matrix kernel gemm_gemv (M <= 4, trans_b); 0: never; -1: by shape
};

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
  // A residual R (the last input) in C's layout (ldc, stride_c) added after the bias, before the activation:
  // a residual Add fused into a conv's epilogue. R must not overlap C (K chunks write C before the last reads R).
  bool residual = false;
  GemmProvider provider = GemmProvider::automatic;
  GemmOwnParams own;  // own-kernel parameters (only read when the own kernel is chosen)

  int64_t eff_lda() const { return lda ? lda : (trans_a ? M : K); }
  int64_t eff_ldb() const { return ldb ? ldb : (trans_b ? K : N); }
  int64_t eff_ldc() const { return ldc ? ldc : N; }
  int64_t eff_stride_a() const { return stride_a >= 0 ? stride_a : (trans_a ? K : M) * eff_lda(); }
  int64_t eff_stride_b() const { return stride_b >= 0 ? stride_b : (trans_b ? N : K) * eff_ldb(); }
  int64_t eff_stride_c() const { return stride_c >= 0 ? stride_c : M * eff_ldc(); }
  double flops() const { return 2.0 * double(M) * double(N) * double(K) * double(batch); }
};

// Inputs: A, B, [bias], [residual]; output: C (read too when beta != 0). Each tensor is used from its view offset
// with the config's leading dimensions and strides; shapes are checked only for element counts.
//
// Provider choice (GemmProvider::automatic), a documented heuristic until a tuning database exists:
//   CPU devices          -> own kernel gemm_tile: MR=6 rows x NR=16 columns per work-item (float16 rows,
//                           12 256-bit accumulators; NR=4 or 8 when N is that narrow), work-group size 1.
//                           B is copied into NR-wide panels first when trans_b (each row of B^T would be
//                           a gather) or when ldb is a multiple of 1024 floats (4 KiB strides alias in
//                           the caches); A is copied into MR-tall panels when row-major with such an lda
//                           (and reused by >= 4 panels of B). Each work-item does mt = 1..8 row blocks
//                           so it has ~64K multiply-adds at least (small K). CLBlast with its default parameters
//                           reaches ~0.1x OpenBLAS on PoCL; this kernel ~0.6-0.9x (`cldl bench gemm`).
//   GPUs / accelerators  -> CLBlast (tuned per device by its own database).
// The tuning database (runtime/tuning.hpp, family "gemm", key tuning::gemm_problem) overrides the
// heuristic's own-kernel parameters that the config leaves at auto; for CLBlast, create() sets the
// database's "clblast_xgemm" parameters for the device (CLBlast holds one set per device and process).
// algorithm() names the choice and its parameters ("own:tile mr=6 nr=16 mt=1 local=1 packA packB",
// "clblast:gemm +epilogue"), also logged at debug level. Packing needs workspace_bytes(); when enqueue
// gets no workspace it uses a scratch buffer owned by the op, and each such call waits for the previous
// one's GEMM (an event), so one op object may serve several queues and threads, serialised on the scratch.
class Gemm : public Op {
 public:
  static void validate(const GemmConfig& cfg);
  static std::unique_ptr<Gemm> create(Context& ctx, int device, const GemmConfig& cfg);
  std::string_view type() const override { return "Gemm"; }
  std::string algorithm() const override { return algorithm_; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;
  // Convenience form.
  void run(const Tensor& a, const Tensor& b, const Tensor& c, ExecutionContext& ec, const Tensor* bias = nullptr,
           const Tensor* residual = nullptr);
  const GemmConfig& config() const { return cfg_; }
  size_t workspace_bytes() const override { return workspace_bytes_; }
  bool uses_clblast() const { return clblast_; }

 private:
  Gemm(Context& ctx, int device, GemmConfig cfg);
  Context* ctx_;
  int device_;
  GemmConfig cfg_;
  std::string algorithm_;
  cl::Kernel kernel_;       // gemm_tile (own) or gemm_epilogue (CLBlast with bias / activation)
  cl::Kernel pack_kernel_;    // gemm_pack_b when B is packed
  cl::Kernel pack_a_kernel_;  // gemm_pack_a when A is packed
  size_t tile_m_ = 1, tile_n_ = 1, nc_ = 1, local_ = 1, mt_ = 1;
  // K split into chunks of k_chunk_ (0: none), one launch each: all but the last with kernel_partial_
  // (no bias, no activation), the later ones adding into C (see Gemm::create).
  int64_t k_chunk_ = 0;
  cl::Kernel kernel_partial_;
  // Column tail (CPUs, B unpacked): the first n_main_ columns (whole strips of nr * nc) run with kernel_,
  // the last N - n_main_ with tail_kernel_ (tail_nr_ x tail_nc_ columns per work-item, tail_mt_ row blocks),
  // so a strip with a few valid columns does not cost a whole one. n_main_ = N: no tail.
  int64_t n_main_ = 0;
  size_t tail_nr_ = 0, tail_nc_ = 0, tail_mt_ = 1;
  cl::Kernel tail_kernel_, tail_kernel_partial_;
  bool clblast_ = false, pack_b_ = false, pack_a_ = false;
  size_t gemv_cols_ = 0;    // > 0: kernel_ is gemm_gemv with this many columns per work-item
  size_t workspace_bytes_ = 0, ws_b_offset_ = 0;  // workspace: [packed A][packed B] (floats)
  Tensor scratch_;          // workspace used when enqueue gets none
  cl::Event scratch_done_;  // last GEMM that read scratch_; the next use waits for it
};

}  // namespace cldl
