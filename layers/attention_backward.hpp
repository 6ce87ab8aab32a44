// Attention training (kernels/attention_backward.cl), flash-style: AttentionTrainForward runs the attention of
// an AttentionConfig and saves each query row's log-sum-exp (LSE [B, Hq, Sq]); AttentionBackward recomputes the
// probabilities tile by tile from Q, K and that LSE and gives dQ, dK and dV (dV = P^T dO, dS = P (dO V^T - D) with
// D = rowsum(dO * O) computed first, dQ = scale dS K, dK = scale dS^T Q), never storing the Sq x Skv matrix in
// global memory: one work-item per query row for dQ (and D), one per key row for dK and dV (summing over the
// query heads of its group, so grouped-query heads are covered).
//
// Supported: both layouts (bshd, the ONNX 3-D one, and bhsd), q heads a multiple of kv heads, causal (with an
// offset), additive (f32) and boolean masks broadcast as the inference op's (their gradient is not computed),
// explicit or default scale, head sizes up to 256. Refused (validate names what): softcap, per-batch kv lengths,
// a KV cache whose capacity exceeds kv_len, qk_matmul_output.
#pragma once
#include <memory>
#include <string>

#include "layers/attention.hpp"
#include "layers/op.hpp"

namespace cldl {

// Inputs: Q, K, V, [mask if cfg.mask != none]. Outputs: Y (as Attention's), LSE f32 [B, Hq, Sq] (-inf for a
// row whose every key is masked; its Y is zeros).
class AttentionTrainForward : public Op {
 public:
  static void validate(const AttentionConfig& cfg);  // what training supports (throws naming the field)
  static Shape lse_shape(const AttentionConfig& cfg) { return Shape{cfg.batch, cfg.q_heads, cfg.q_len}; }
  static std::unique_ptr<AttentionTrainForward> create(Context& ctx, int device, const AttentionConfig& cfg);
  std::string_view type() const override { return "AttentionTrain"; }
  std::string algorithm() const override { return "attn_train_fwd: one work-item per query row, online softmax, LSE saved"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  explicit AttentionTrainForward(AttentionConfig cfg) : cfg_(std::move(cfg)) {}
  AttentionConfig cfg_;
  cl::Kernel kernel_;
};

// Inputs: Q, K, V, mask (an empty tensor when cfg.mask == none), O (the forward's Y), LSE, dO.
// Outputs: dQ, dK, dV (shapes of Q, K, V). Workspace: D [B, Hq, Sq].
class AttentionBackward : public Op {
 public:
  static std::unique_ptr<AttentionBackward> create(Context& ctx, int device, const AttentionConfig& cfg);
  std::string_view type() const override { return "AttentionGrad"; }
  std::string algorithm() const override {
    return "flash-style: P recomputed from the saved LSE; attn_bwd_dq per query row, attn_bwd_dkv per key row";
  }
  size_t workspace_bytes() const override { return size_t(cfg_.batch * cfg_.q_heads * cfg_.q_len) * sizeof(float); }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  explicit AttentionBackward(AttentionConfig cfg) : cfg_(std::move(cfg)) {}
  AttentionConfig cfg_;
  cl::Kernel dq_, dkv_;
};

}  // namespace cldl
