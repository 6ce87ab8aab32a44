// Transformer companions of Attention (kernels/transformer.cl): LayerNormalization and RMSNormalization
// over the last axes with an optional fused residual add, rotary position embedding (interleaved and
// half-split, partial rotary dims), embedding lookup (Gather rows by int32/int64 ids) and SwiGLU. GELU
// (erf and tanh forms) and SiLU are activations (layers/activation.hpp) fused into GEMM epilogues; the
// feed-forward block is FeedForward below: Gemm(+bias+activation) then Gemm(+bias).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "layers/gemm.hpp"
#include "layers/op.hpp"

namespace cldl {

// ---- LayerNormalization / RMSNormalization --------------------------------------------------------
struct LayerNormConfig {
  bool rms = false;         // RMSNormalization (no mean, no bias)
  Shape input;              // X's shape
  int64_t axis = -1;        // first normalised axis (ONNX semantics, negative counts from the end)
  float epsilon = 1e-5f;
  bool bias = true;         // LayerNorm: a bias input B follows the scale
  bool residual = false;    // X + R is normalised (R as a second input); outputs Y [, the sum]
  bool residual_sum_output = false;  // also store X + R (the next block's residual)
  bool stats_output = false;  // also output Mean and InvStdDev per row (ONNX LayerNormalization outputs 1, 2)
  int wg_size = 0;          // work-items per row (power of two); 0 = by device (1 on CPUs, up to 256)
  int64_t rows() const;     // product of the axes before `axis`
  int64_t cols() const;     // product of the normalised axes
};

// Inputs: X, [R if residual], scale (cols elements), [B if bias && !rms]; outputs: Y [, X + R]
// [, Mean, InvStdDev (rows elements each) if stats_output].
class LayerNorm : public Op {
 public:
  static Shape validate(const LayerNormConfig& cfg);
  static std::unique_ptr<LayerNorm> create(Context& ctx, int device, const LayerNormConfig& cfg);
  std::string_view type() const override { return cfg_.rms ? "RMSNormalization" : "LayerNormalization"; }
  std::string algorithm() const override { return algorithm_; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  explicit LayerNorm(LayerNormConfig c) : cfg_(std::move(c)) {}
  LayerNormConfig cfg_;
  std::string algorithm_;
  size_t wg_ = 1;
  cl::Kernel kernel_;
};

// ---- Rotary position embedding (ONNX RotaryEmbedding, opset 23) ------------------------------------
struct RotaryConfig {
  int64_t batch = 1, heads = 1, seq = 1, head_size = 0;
  bool seq_first = false;     // X is [B, S, H*D] (ONNX 3-D) instead of [B, H, S, D]
  int64_t rotary_dim = 0;     // 0 = head_size; the dims past it are copied
  bool interleaved = false;   // pairs (2i, 2i+1) instead of halves (i, i + rotary_dim/2)
  bool position_ids = false;  // cos/sin [max_pos, rotary_dim/2] indexed by int64 position_ids [B, S]
  int64_t max_pos = 0;        // rows of cos/sin when position_ids; else cos/sin are [B, S, rotary_dim/2]
};

// Inputs: X, cos, sin, [position_ids]; output: Y (X's shape, must not alias X).
class Rotary : public Op {
 public:
  static Shape validate(const RotaryConfig& cfg);
  static std::unique_ptr<Rotary> create(Context& ctx, int device, const RotaryConfig& cfg);
  std::string_view type() const override { return "RotaryEmbedding"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  explicit Rotary(RotaryConfig c) : cfg_(std::move(c)) {}
  RotaryConfig cfg_;
  cl::Kernel kernel_;
};

// ---- Embedding lookup (Gather on axis 0 of a [V, E] table) -----------------------------------------
struct EmbeddingConfig {
  int64_t vocab = 0, dim = 0;
  Shape ids;               // any shape; the output is ids + [dim]
  DType id_type = DType::i64;  // i32 or i64
};

// Inputs: table [V, E], ids; output: [ids..., E]. Negative ids count from the end; ids outside [-V, V)
// give zero rows (checked on the host is impossible without a sync; the importer validates constants).
class Embedding : public Op {
 public:
  static Shape validate(const EmbeddingConfig& cfg);
  static std::unique_ptr<Embedding> create(Context& ctx, int device, const EmbeddingConfig& cfg);
  std::string_view type() const override { return "Gather"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  explicit Embedding(EmbeddingConfig c) : cfg_(std::move(c)) {}
  EmbeddingConfig cfg_;
  cl::Kernel kernel_;
};

// ---- SwiGLU: [rows, 2F] -> [rows, F] = silu(first half) * second half ------------------------------
class SwiGlu : public Op {
 public:
  static Shape validate(const Shape& input);
  static std::unique_ptr<SwiGlu> create(Context& ctx, int device, const Shape& input);
  std::string_view type() const override { return "SwiGLU"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  explicit SwiGlu(Shape s) : input_(std::move(s)) {}
  Shape input_;
  cl::Kernel kernel_;
};

// ---- Feed-forward block: Y = act(X W1 + b1) W2 + b2 -----------------------------------------------
struct FeedForwardConfig {
  int64_t rows = 0, model_dim = 0, hidden_dim = 0;
  Activation act{Act::gelu};  // gelu (erf), gelu_tanh, relu, silu, ...
};

// Inputs: X [rows, model], W1 [model, hidden], b1 [hidden], W2 [hidden, model], b2 [model]; output Y
// [rows, model]; workspace: the hidden activations.
class FeedForward : public Op {
 public:
  static void validate(const FeedForwardConfig& cfg);
  static std::unique_ptr<FeedForward> create(Context& ctx, int device, const FeedForwardConfig& cfg);
  std::string_view type() const override { return "FeedForward"; }
  std::string algorithm() const override { return up_->algorithm() + " -> " + down_->algorithm(); }
  size_t workspace_bytes() const override { return size_t(cfg_.rows * cfg_.hidden_dim) * sizeof(float); }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  explicit FeedForward(FeedForwardConfig c) : cfg_(std::move(c)) {}
  FeedForwardConfig cfg_;
  std::unique_ptr<Gemm> up_, down_;
};

}  // namespace cldl
