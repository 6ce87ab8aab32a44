// Ops of current language models in ONNX 1.23 semantics (kernels/llm.cl): TensorScatter (KV-cache
// update, linear or circular), SwiGLU of a gate and a value input, CausalConvWithState (depthwise causal
// conv carrying its last K - 1 inputs) and LinearAttention (linear / gated / delta / gated-delta
// recurrences, GQA head sharing, past state in, present state out). Activations are f32 or f16 (computed
// in fp32, stored f16); shapes are fixed at create.
#pragma once
#include <memory>
#include <vector>

#include "layers/op.hpp"

namespace cldl {

struct TensorScatterConfig {
  Shape cache;               // past_cache / present_cache: [batch, D1 ... L ... Dn]
  Shape update;              // the cache's shape with S <= L along `axis`
  DType dtype = DType::f32;  // any (moved as bytes)
  int64_t axis = -2;         // the sequence axis; not 0 (the batch)
  bool circular = false;     // write positions modulo L
  bool has_indices = false;  // write_indices [batch] (i64); absent = zeros
};

// Inputs past_cache, update and, when has_indices, write_indices; output present_cache (the cache's shape):
// one kernel writing every element of present_cache (the update rows, the rest from past_cache); where
// past_cache and present_cache are the same bytes (bound so by the caller), a kernel writing the update rows.
class TensorScatter : public Op {
 public:
  // The axis as a non-negative index; errors name the argument.
  static int64_t validate(const TensorScatterConfig& cfg);
  static std::unique_ptr<TensorScatter> create(Context& ctx, int device, const TensorScatterConfig& cfg);
  std::string_view type() const override { return "TensorScatter"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  TensorScatterConfig cfg_;
  int64_t axis_ = 0;
  Context* ctx_ = nullptr;  // for the copy of an empty update
  cl::Kernel kernel_, whole_kernel_;
};

// Inputs A (gate) and B (value) of one shape, f32 or f16; output Y = A * sigmoid(alpha * A) * B.
// (layers/transformer.hpp's SwiGlu is the packed form: one input holding both halves.)
class SwiGluPair : public Op {
 public:
  static void validate(const Shape& shape, DType dtype);
  static std::unique_ptr<SwiGluPair> create(Context& ctx, int device, const Shape& shape, DType dtype, float alpha);
  std::string_view type() const override { return "SwiGLU"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  Shape shape_;
  DType dtype_ = DType::f32;
  float alpha_ = 1.0f;
  cl::Kernel kernel_;
};

struct CausalConvConfig {
  Shape input;               // [B, C, L]
  int64_t kernel_size = 1;   // K: weight [C, 1, K]
  DType dtype = DType::f32;  // f32 or f16, every tensor
  bool has_bias = false, has_past = false;
  bool silu = false;  // activation 'silu' / 'swish'
};

// Inputs input, weight and then bias [C] and past_state [B, C, K - 1] when present (in that order);
// outputs output [B, C, L] and present_state [B, C, K - 1] (may be left out).
class CausalConvWithState : public Op {
 public:
  static void validate(const CausalConvConfig& cfg);
  static std::unique_ptr<CausalConvWithState> create(Context& ctx, int device, const CausalConvConfig& cfg);
  std::string_view type() const override { return "CausalConvWithState"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  CausalConvConfig cfg_;
  cl::Kernel kernel_;
};

enum class LinearAttentionRule { linear, gated, delta, gated_delta };

struct LinearAttentionConfig {
  int64_t batch = 1, seq = 1;              // B, T
  int64_t q_heads = 1, kv_heads = 1;       // q_heads a multiple of kv_heads (GQA)
  int64_t head_dim_k = 1, head_dim_v = 1;  // d_k (query and key), d_v (value)
  LinearAttentionRule rule = LinearAttentionRule::gated_delta;
  bool decay_per_key = true;  // decay [B, T, kv_heads * d_k]; else [B, T, kv_heads] (gated rules)
  int64_t beta_heads = 1;     // beta [B, T, kv_heads] or [B, T, 1] (delta rules)
  bool has_past = false;
  float scale = 0.0f;              // 0: 1 / sqrt(d_k)
  DType dtype = DType::f32;        // query, key, value, decay, beta, output: f32 or f16
  DType state_dtype = DType::f32;  // past / present state: f32 or f16
};

// Inputs query, key, value, then past_state (when has_past), decay (gated rules), beta (delta rules), in that
// order; outputs output [B, T, q_heads * d_v] and present_state [B, kv_heads, d_k, d_v] (may be left out).
// One launch runs all T steps: a work-item per state column (batch, KV head, value dim), the column in
// private memory for d_k up to LA_MAX_PRIVATE_DK (k_t and exp(decay) staged in local memory per
// work-group), else in the workspace (workspace_bytes).
class LinearAttention : public Op {
 public:
  static void validate(const LinearAttentionConfig& cfg);
  static std::unique_ptr<LinearAttention> create(Context& ctx, int device, const LinearAttentionConfig& cfg,
                                                 bool force_global_state = false);
  std::string_view type() const override { return "LinearAttention"; }
  std::string algorithm() const override;
  size_t workspace_bytes() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  LinearAttentionConfig cfg_;
  bool private_state_ = true;
  size_t local_ = 1;  // work-items per group along the value dim (private-state kernel)
  cl::Kernel kernel_;
};

}  // namespace cldl
