// Index ops in ONNX semantics: ScatterElements, ScatterND, GatherND, OneHot, Hardmax, Einsum, MaxUnpool,
// Trilu, NonZero.
// Kernels: kernels/index.cl, one build per element type. Moves (scatter without reduction, gathers,
// OneHot, MaxUnpool) work on any dtype; scatter reductions, Hardmax and Einsum compute on f32, f64
// (cl_khr_fp64), f16 / bf16 (f32 arithmetic) and the integers. Negative indices count from the end;
// out-of-range ones (an error in ONNX, which a kernel cannot raise) are skipped by scatters and read as
// zeros by gathers. NonZero's output shape is its values: it writes into a buffer of the largest shape
// it can have plus the count (a counted output, models/passes.hpp CountedValue).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/gemm.hpp"
#include "layers/op.hpp"

namespace cldl {

enum class ScatterReduction { none, add, mul, max, min };
std::string_view to_string(ScatterReduction r);
// "none", "add", "mul", "max", "min"; errors name the op and the value.
ScatterReduction scatter_reduction(std::string_view op, std::string_view name);

struct ScatterElementsConfig {
  Shape input;
  DType dtype = DType::f32;
  Shape indices;                   // also the updates' shape; same rank as input
  DType index_dtype = DType::i64;  // i32 or i64
  int64_t axis = 0;
  ScatterReduction reduction = ScatterReduction::none;
  // Reduction none: -1 auto, 0 the ordered walk, 1 one work-item per update (winner workspace).
  int per_update = -1;
};

// Inputs data, indices, updates; output = data with updates[p] written (or reduced) at p with
// coordinate `axis` replaced by indices[p]. Duplicates reduce in index order (none: the last wins).
// Each updates line along the axis is walked in order by one work-item; on GPUs and accelerators,
// reduction none with fewer than 64 lines instead runs one work-item per update over a winner
// workspace (atomic_max of the update's position), same result; without the workspace it walks.
class ScatterElements : public Op {
 public:
  static Shape validate(const ScatterElementsConfig& cfg);
  static std::unique_ptr<ScatterElements> create(Context& ctx, int device, const ScatterElementsConfig& cfg);
  std::string_view type() const override { return "ScatterElements"; }
  std::string algorithm() const override;
  size_t workspace_bytes() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  ScatterElementsConfig cfg_;
  cl::Kernel copy_, scatter_, init_, winner_kernel_;
  bool winner_ = false;  // reduction none with few lines: one work-item per update (needs the workspace)
};

struct ScatterNDConfig {
  Shape input;
  DType dtype = DType::f32;
  Shape indices;  // [..., k], 1 <= k <= rank(input)
  DType index_dtype = DType::i64;
  ScatterReduction reduction = ScatterReduction::none;
  int per_update = -1;  // as ScatterElementsConfig::per_update
};

// Inputs data, indices, updates (shape indices[:-1] + input[k:]); output = data with each slice
// input[indices[i]] replaced by (or reduced with) updates[i], in index order.
class ScatterND : public Op {
 public:
  static Shape validate(const ScatterNDConfig& cfg);
  static Shape updates_shape(const ScatterNDConfig& cfg);
  static std::unique_ptr<ScatterND> create(Context& ctx, int device, const ScatterNDConfig& cfg);
  std::string_view type() const override { return "ScatterND"; }
  std::string algorithm() const override;
  size_t workspace_bytes() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  ScatterNDConfig cfg_;
  cl::Kernel copy_, scatter_, init_, winner_kernel_;
  bool winner_ = false;  // reduction none, slices under 64 elements: one work-item per updated element
};

struct GatherNDConfig {
  Shape input;
  DType dtype = DType::f32;
  Shape indices;  // [..., k]; its first batch_dims dims equal the input's
  DType index_dtype = DType::i64;
  int64_t batch_dims = 0;
};

// Inputs data, indices; output shape indices[:-1] + input[batch_dims + k:].
class GatherND : public Op {
 public:
  static Shape validate(const GatherNDConfig& cfg);
  static std::unique_ptr<GatherND> create(Context& ctx, int device, const GatherNDConfig& cfg);
  std::string_view type() const override { return "GatherND"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  GatherNDConfig cfg_;
  cl::Kernel kernel_;
};

struct OneHotConfig {
  Shape indices;
  DType index_dtype = DType::i64;  // any integer, f32 or f64 (truncated to an integer)
  int64_t depth = 0;               // > 0, known at load (it decides the output shape)
  DType dtype = DType::f32;        // of values and the output
  int64_t axis = -1;               // where the depth dim goes, in [-(r+1), r]
  bool negative_wraps = true;      // -1 is depth - 1 (opset 11+); false: a negative index gives all off (9-10)
};

// Inputs indices, values ([off, on]); output has `depth` inserted at `axis` of the indices' shape.
class OneHot : public Op {
 public:
  static Shape validate(const OneHotConfig& cfg);
  static std::unique_ptr<OneHot> create(Context& ctx, int device, const OneHotConfig& cfg);
  std::string_view type() const override { return "OneHot"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  OneHotConfig cfg_;
  Shape out_;
  cl::Kernel kernel_;
};

struct HardmaxConfig {
  Shape input;
  DType dtype = DType::f32;  // f32, f64, f16, bf16
  int64_t axis = -1;
};

// 1 at the first maximum along `axis`, 0 elsewhere (opset 13 semantics: one axis).
class Hardmax : public Op {
 public:
  static Shape validate(const HardmaxConfig& cfg);
  static std::unique_ptr<Hardmax> create(Context& ctx, int device, const HardmaxConfig& cfg);
  std::string_view type() const override { return "Hardmax"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  HardmaxConfig cfg_;
  cl::Kernel kernel_;
};

struct TriluConfig {
  Shape input;               // rank >= 2: [..., N, M]
  DType dtype = DType::f32;  // any storage type (moved, never computed)
  int64_t k = 0;             // diagonal offset: > 0 above the main diagonal, < 0 below
  bool upper = true;
};

// The upper (upper = true: keep j - i >= k) or lower (keep j - i <= k) triangle of each [N, M] matrix
// of the input, zeros elsewhere (ONNX Trilu).
class Trilu : public Op {
 public:
  static Shape validate(const TriluConfig& cfg);
  static std::unique_ptr<Trilu> create(Context& ctx, int device, const TriluConfig& cfg);
  std::string_view type() const override { return "Trilu"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  TriluConfig cfg_;
  cl::Kernel kernel_;
};

struct EinsumConfig {
  std::string equation;       // "ij,jk->ik", "...ii->...i", implicit output ("ij,jk") as numpy
  std::vector<Shape> inputs;  // 1 to 4
  DType dtype = DType::f32;
};

// The labels of an equation after parsing: every label's extent, and per input its stride for each
// label (output labels first, in output order, then the contracted ones).
struct EinsumPlan {
  Shape output;
  std::vector<int64_t> sizes;                 // per label
  std::vector<std::vector<int64_t>> strides;  // [input][label]
  int n_out = 0, n_sum = 0;
};

// An f32 contraction of two inputs over one label, whose other labels are one optional batch label
// (first in the output) and one row label of each input, each operand a plain or transposed matrix
// ("bij,bjk->bik", "ij,kj->ki", "bji,bjk->bik"), runs as one strided-batched Gemm; any other equation
// is evaluated directly: one work-item per output element sums the products over the contracted labels.
class Einsum : public Op {
 public:
  static constexpr int kMaxInputs = 4, kMaxLabels = 16;
  static Shape validate(const EinsumConfig& cfg);
  static EinsumPlan plan(const EinsumConfig& cfg);
  static std::unique_ptr<Einsum> create(Context& ctx, int device, const EinsumConfig& cfg);
  std::string_view type() const override { return "Einsum"; }
  std::string algorithm() const override;
  size_t workspace_bytes() const override { return gemm_ ? gemm_->workspace_bytes() : 0; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  EinsumConfig cfg_;
  EinsumPlan plan_;
  cl::Kernel kernel_;
  std::unique_ptr<Gemm> gemm_;  // set when the equation is a (batched) matrix product
  bool gemm_swap_ = false;      // Gemm's A is input 1 (the output's row label is input 1's)
};

struct MaxUnpoolConfig {
  Shape input;  // N, C, spatial... (1 to 3 spatial dims)
  DType dtype = DType::f32;
  DType index_dtype = DType::i64;                    // i32 or i64
  std::vector<int64_t> kernel_shape, strides, pads;  // strides default 1, pads (begins, ends) default 0
  std::vector<int64_t> output_shape;                 // empty = (in - 1) * stride - pads + kernel per spatial dim
};

// Inputs X, I (MaxPool's Indices: flat over the unpooled shape, N and C included); output zeros with
// X[i] at I[i]. Repeated indices take the last element (deterministic, through a winner workspace).
class MaxUnpool : public Op {
 public:
  static Shape validate(const MaxUnpoolConfig& cfg);
  static Shape inferred_shape(const MaxUnpoolConfig& cfg);  // the shape the indices refer to
  static std::unique_ptr<MaxUnpool> create(Context& ctx, int device, const MaxUnpoolConfig& cfg);
  std::string_view type() const override { return "MaxUnpool"; }
  size_t workspace_bytes() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  MaxUnpoolConfig cfg_;
  Shape out_, unpooled_;
  cl::Kernel init_, claim_, write_;
};

struct NonZeroConfig {
  Shape input;  // any rank (a scalar counts as [1])
  DType dtype = DType::f32;
};

// Inputs X; outputs Y (i64 [max(rank, 1), numel]: the upper bound) and count (i64 [1]). Writes the
// coordinates of X's non-zero elements (NaN counts), in row-major order, as a [rank, count] tensor at the
// start of Y (Y[d * count + i]: the real output is the first rank * count elements, no copy), and count.
// One work-group: each work-item counts a contiguous segment, a prefix sum over the segments places each
// segment's hits (no atomics, deterministic order).
class NonZero : public Op {
 public:
  static Shape validate(const NonZeroConfig& cfg);  // the bound shape
  static std::unique_ptr<NonZero> create(Context& ctx, int device, const NonZeroConfig& cfg);
  std::string_view type() const override { return "NonZero"; }
  std::string algorithm() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  NonZeroConfig cfg_;
  cl::Kernel kernel_;
  size_t local_ = 1;
};

}  // namespace cldl
