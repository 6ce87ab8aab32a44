// Data-movement ops in ONNX semantics, on any dtype (values are moved, never interpreted; Resize is
// f32): Transpose, Concat, Split, Slice, Pad, Expand, Tile, Gather, GatherElements, Resize. Kernels:
// kernels/data.cl.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers/op.hpp"
#include "layers/strided.hpp"

namespace cldl {

// A strided copy (the kernel behind Transpose, Slice, Expand, Concat, Split) over an Iteration whose
// operand 0 is the source and 1 the destination. plan() picks the kernel once per iteration:
// - rows (CPUs): both operands contiguous along the innermost dim; vector runs per work-item;
// - tiles (CPUs): the destination contiguous along the innermost dim and the source along another, which
//   moves next to it; a 2-D tile per work-item (transposes);
// - element: one element per work-item (GPUs, where neighbouring items already coalesce, and every
//   other CPU case: broadcasts, strided slices).
struct CopyPlan {
  enum class Kind { element, rows, tiles };
  Kind kind = Kind::element;
  Iteration it;  // for tiles, the source-contiguous dim is moved to rank - 2
  cl::NDRange global, local;
  std::string describe() const;  // "tiles 16x16, rank 3 after collapsing"
};

class StridedCopy {
 public:
  StridedCopy() = default;
  StridedCopy(Context& ctx, int device, DType dtype);
  // `force` picks a kernel instead of the device's choice (tests run each on any device); a kernel that
  // does not apply to `it` is refused with an error naming it.
  CopyPlan plan(const Iteration& it, std::optional<CopyPlan::Kind> force = std::nullopt) const;
  void enqueue(const CopyPlan& plan, const Tensor& src, int64_t src_elem_off, const Tensor& dst, int64_t dst_elem_off,
               ExecutionContext& ec);

 private:
  cl::Kernel element_, rows_, tiles_;
  bool cpu_ = false;
};

struct TransposeConfig {
  Shape input;
  DType dtype = DType::f32;
  std::vector<int64_t> perm;  // empty = reverse the dims (ONNX default)
};

class Transpose : public Op {
 public:
  static Shape validate(const TransposeConfig& cfg);
  static std::unique_ptr<Transpose> create(Context& ctx, int device, const TransposeConfig& cfg);
  std::string_view type() const override { return "Transpose"; }
  std::string algorithm() const override { return plan_.describe(); }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  TransposeConfig cfg_;
  Shape out_;
  CopyPlan plan_;
  StridedCopy copy_;
};

struct ConcatConfig {
  std::vector<Shape> inputs;
  DType dtype = DType::f32;
  int64_t axis = 0;
};

class Concat : public Op {
 public:
  static Shape validate(const ConcatConfig& cfg);
  static std::unique_ptr<Concat> create(Context& ctx, int device, const ConcatConfig& cfg);
  std::string_view type() const override { return "Concat"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  ConcatConfig cfg_;
  Shape out_;
  std::vector<CopyPlan> plans_;
  std::vector<int64_t> dst_off_;
  StridedCopy copy_;
};

struct SplitConfig {
  Shape input;
  DType dtype = DType::f32;
  int64_t axis = 0;
  std::vector<int64_t> split;  // sizes along axis; empty = num_outputs equal parts (last one smaller)
  int num_outputs = 0;          // used when split is empty
};

class Split : public Op {
 public:
  static std::vector<Shape> validate(const SplitConfig& cfg);
  static std::unique_ptr<Split> create(Context& ctx, int device, const SplitConfig& cfg);
  std::string_view type() const override { return "Split"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  SplitConfig cfg_;
  std::vector<Shape> outs_;
  std::vector<CopyPlan> plans_;
  std::vector<int64_t> src_off_;
  StridedCopy copy_;
};

struct SliceConfig {
  Shape input;
  DType dtype = DType::f32;
  std::vector<int64_t> starts, ends, axes, steps;  // axes empty = 0..n-1; steps empty = 1
};

class Slice : public Op {
 public:
  static Shape validate(const SliceConfig& cfg);
  static std::unique_ptr<Slice> create(Context& ctx, int device, const SliceConfig& cfg);
  std::string_view type() const override { return "Slice"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  SliceConfig cfg_;
  Shape out_;
  CopyPlan plan_;
  int64_t src_off_ = 0;
  StridedCopy copy_;
};

enum class PadMode { constant, reflect, edge, wrap };  // wrap: the input repeated along the axis

struct PadConfig {
  Shape input;
  DType dtype = DType::f32;
  std::vector<int64_t> pads;  // ONNX: begins of every axis (or of `axes`), then ends
  std::vector<int64_t> axes;  // empty = all
  PadMode mode = PadMode::constant;
  double value = 0.0;         // constant mode, converted to dtype
  int kernel = 0;             // 0 by device (rows on CPUs), 1 an element per work-item, 2 an output row per work-item
};

class Pad : public Op {
 public:
  static Shape validate(const PadConfig& cfg);
  static std::unique_ptr<Pad> create(Context& ctx, int device, const PadConfig& cfg);
  std::string_view type() const override { return "Pad"; }
  std::string algorithm() const override { return rows_ ? "an output row per work-item" : "an element per work-item"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  PadConfig cfg_;
  Shape out_;
  std::vector<int64_t> begin_;
  bool rows_ = false;  // pad_rows (CPUs) or pad
  cl::Kernel kernel_;
};

struct ExpandConfig {
  Shape input;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  // target, numpy-broadcast with the input (ONNX Expand)
};

class Expand : public Op {
 public:
  static Shape validate(const ExpandConfig& cfg);
  static std::unique_ptr<Expand> create(Context& ctx, int device, const ExpandConfig& cfg);
  std::string_view type() const override { return "Expand"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  ExpandConfig cfg_;
  Shape out_;
  CopyPlan plan_;
  StridedCopy copy_;
};

struct TileConfig {
  Shape input;
  DType dtype = DType::f32;
  std::vector<int64_t> repeats;  // one per dim, >= 0
};

class Tile : public Op {
 public:
  static Shape validate(const TileConfig& cfg);
  static std::unique_ptr<Tile> create(Context& ctx, int device, const TileConfig& cfg);
  std::string_view type() const override { return "Tile"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  TileConfig cfg_;
  Shape out_;
  cl::Kernel kernel_;
};

struct GatherConfig {
  Shape input;
  DType dtype = DType::f32;
  Shape indices;
  DType index_dtype = DType::i64;  // i32 or i64
  int64_t axis = 0;
};

// Inputs data, indices; negative indices count from the end; out-of-range ones give zeros.
class Gather : public Op {
 public:
  static Shape validate(const GatherConfig& cfg);
  static std::unique_ptr<Gather> create(Context& ctx, int device, const GatherConfig& cfg);
  std::string_view type() const override { return "Gather"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  GatherConfig cfg_;
  Shape out_;
  int64_t outer_ = 1, inner_ = 1;
  size_t items_ = 1;  // work-items per group (launch.hpp)
  size_t max_ly_ = 1, max_lz_ = 1;  // the device's work-item sizes along y and z, as powers of two
  cl::Kernel kernel_;
};

struct GatherElementsConfig {
  Shape input;
  DType dtype = DType::f32;
  Shape indices;  // same rank as input; the output's shape
  DType index_dtype = DType::i64;  // i32 or i64
  int64_t axis = 0;
};

// ONNX GatherElements: inputs data, indices; out[p] = data[p with coordinate `axis` = indices[p]].
// Negative indices count from the end; out-of-range ones give zeros.
class GatherElements : public Op {
 public:
  static Shape validate(const GatherElementsConfig& cfg);
  static std::unique_ptr<GatherElements> create(Context& ctx, int device, const GatherElementsConfig& cfg);
  std::string_view type() const override { return "GatherElements"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  GatherElementsConfig cfg_;
  cl::Kernel kernel_;
};

enum class ResizeMode { nearest, linear, cubic };
enum class ResizeCoord {
  half_pixel,
  asymmetric,
  align_corners,
  pytorch_half_pixel,
  tf_half_pixel_for_nearest,
  half_pixel_symmetric,
  tf_crop_and_resize
};
enum class ResizeNearest { round_prefer_floor, round_prefer_ceil, floor, ceil };
enum class ResizeTable { automatic, on, off };

struct ResizeConfig {
  Shape input;                  // rank >= 2; only the last two dims may change
  std::vector<float> scales;    // one per dim, or empty when sizes are given
  std::vector<int64_t> sizes;   // one per dim, or empty when scales are given
  ResizeMode mode = ResizeMode::nearest;
  ResizeCoord coord = ResizeCoord::half_pixel;
  ResizeNearest nearest = ResizeNearest::round_prefer_floor;
  float cubic_coeff_a = -0.75f;
  bool exclude_outside = false;
  // tf_crop_and_resize only: the region of interest, starts of every dim then ends (2 * rank values, in
  // units of the input extent - 1); dims before the last two must keep [0, 1] (or have extent 1).
  // Outputs whose source coordinate falls outside the input get extrapolation_value. With scales the
  // output length is floor(in * scale), as ONNX Runtime and the ONNX reference compute it.
  std::vector<float> roi = {};
  float extrapolation_value = 0.0f;
  // linear / cubic: when a dim is downscaled (scale < 1) the filter is stretched by 1 / scale so every
  // input under an output pixel contributes (ONNX antialias; nearest ignores it).
  bool antialias = false;
  // Kernels: per-axis tables (nearest, or linear without antialias, not tf_crop_and_resize) or per-pixel
  // coordinates. automatic: tables on CPUs where they apply; on: tables (an error where they do not apply).
  ResizeTable table = ResizeTable::automatic;
};

class Resize : public Op {
 public:
  static Shape validate(const ResizeConfig& cfg);
  static std::unique_ptr<Resize> create(Context& ctx, int device, const ResizeConfig& cfg);
  std::string_view type() const override { return "Resize"; }
  std::string algorithm() const override { return table_ ? "axis tables, 8 outputs per work-item" : "per pixel"; }
  // The table kernels' index and weight tables (3 * (OH + OW) values); 0 for the per-pixel kernel.
  size_t workspace_bytes() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  ResizeConfig cfg_;
  Shape out_;
  cl_float4 geo_h_{}, geo_w_{};  // per resized dim: scale, in * scale, crop a, crop b (kernels/data.cl)
  cl_int4 valid_{};              // tf_crop_and_resize: first and last output row / column inside the input
  cl::Kernel kernel_;
  // CPUs, nearest / linear without antialias or crop: resize_axis_table then resize2d_table
  // (kernels/data.cl); resize2d per output pixel otherwise.
  bool table_ = false;
  cl::Kernel table_kernel_;
  cl::NDRange global_, local_;
};

}  // namespace cldl
