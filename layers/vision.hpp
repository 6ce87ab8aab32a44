// Vision ops of detection and spatial-transformer models in ONNX semantics: RoiAlign, GridSample, AffineGrid,
// CenterCropPad, Col2Im and DeformConv (kernels/vision.cl; CenterCropPad on data.cl's pad kernel). f32 data; the
// geometry (sizes, crops, block shapes) is fixed at create. NonMaxSuppression, whose output shape depends
// on the data, folds on the host (models/ops_vision.cpp).
#pragma once
#include <memory>
#include <vector>

#include "layers/op.hpp"

namespace cldl {

enum class RoiAlignMode { avg, max };

struct RoiAlignConfig {
  Shape input;  // X: [N, C, H, W]
  int64_t num_rois = 1;
  int64_t output_height = 1, output_width = 1;
  int64_t sampling_ratio = 0;  // 0: ceil(roi extent / output extent) points per bin and dim
  float spatial_scale = 1.0f;
  bool half_pixel = true;  // coordinate_transformation_mode: half_pixel, else output_half_pixel
  RoiAlignMode mode = RoiAlignMode::avg;
};

// Inputs X (f32), rois (f32, [num_rois, 4] as x1, y1, x2, y2), batch_indices (i64, [num_rois]); output
// [num_rois, C, output_height, output_width]. A batch index outside [0, N) gives zeros.
class RoiAlign : public Op {
 public:
  static Shape validate(const RoiAlignConfig& cfg);
  static std::unique_ptr<RoiAlign> create(Context& ctx, int device, const RoiAlignConfig& cfg);
  std::string_view type() const override { return "RoiAlign"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  RoiAlignConfig cfg_;
  Shape out_;
  cl::Kernel kernel_;
};

enum class GridSampleMode { linear, nearest, cubic };
enum class GridPadding { zeros, border, reflection };

struct GridSampleConfig {
  Shape input;  // X: [N, C, D1 ... Dk], k = 1 to 3
  Shape grid;   // [N, P1 ... Pk, k]
  GridSampleMode mode = GridSampleMode::linear;
  GridPadding padding = GridPadding::zeros;
  bool align_corners = false;
};

// Inputs X and grid (f32); output [N, C, P1 ... Pk]. Grid coordinates in [-1, 1], innermost dim first.
class GridSample : public Op {
 public:
  static Shape validate(const GridSampleConfig& cfg);
  static std::unique_ptr<GridSample> create(Context& ctx, int device, const GridSampleConfig& cfg);
  std::string_view type() const override { return "GridSample"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  GridSampleConfig cfg_;
  Shape out_;
  cl::Kernel kernel_;
};

struct AffineGridConfig {
  Shape theta;                // [N, 2, 3] or [N, 3, 4]
  std::vector<int64_t> size;  // [N, C, H, W] or [N, C, D, H, W]
  bool align_corners = false;
};

// Input theta (f32); output [N, H, W, 2] or [N, D, H, W, 3].
class AffineGrid : public Op {
 public:
  static Shape validate(const AffineGridConfig& cfg);
  static std::unique_ptr<AffineGrid> create(Context& ctx, int device, const AffineGridConfig& cfg);
  std::string_view type() const override { return "AffineGrid"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  AffineGridConfig cfg_;
  Shape out_;
  cl::Kernel kernel_;
};

struct CenterCropPadConfig {
  Shape input;
  DType dtype = DType::f32;    // any (moved as bytes)
  std::vector<int64_t> shape;  // the target extent of each of `axes`
  std::vector<int64_t> axes;   // empty = all, in order; negative count from the end
};

// Input of any dtype; output of the input's shape with each of `axes` cropped or zero-padded to its target
// around the centre (ONNX: the extra element of an odd difference goes to the end).
class CenterCropPad : public Op {
 public:
  static Shape validate(const CenterCropPadConfig& cfg);
  static std::unique_ptr<CenterCropPad> create(Context& ctx, int device, const CenterCropPadConfig& cfg);
  std::string_view type() const override { return "CenterCropPad"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  CenterCropPadConfig cfg_;
  Shape out_;
  std::vector<int64_t> begin_;  // output index - input index per dim (negative: a crop)
  cl::Kernel kernel_;
};

struct Col2ImConfig {
  Shape input;                                    // [N, C * prod(block), L]
  std::vector<int64_t> image, block;              // spatial extents of the image and of one block (1 to 8 dims)
  std::vector<int64_t> dilations, pads, strides;  // empty = 1s, 0s (begins then ends), 1s
};

// Input f32; output [N, C, image...]: the sum of the overlapping blocks (the inverse of im2col's layout).
class Col2Im : public Op {
 public:
  static Shape validate(const Col2ImConfig& cfg);
  static std::unique_ptr<Col2Im> create(Context& ctx, int device, const Col2ImConfig& cfg);
  std::string_view type() const override { return "Col2Im"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  Col2ImConfig cfg_;
  Shape out_;
  std::vector<int64_t> blocks_;
  cl::Kernel kernel_;
};

struct DeformConvConfig {
  Shape input;   // X: [N, C, H, W]
  Shape weight;  // W: [oC, C / group, kH, kW]
  int64_t group = 1, offset_group = 1;
  std::vector<int64_t> strides, pads, dilations;  // empty = 1s, 0s (begins then ends), 1s
  bool has_bias = false, has_mask = false;
};

// Inputs X, W, offset [N, offset_group * 2 * kH * kW, oH, oW] (f32), then B [oC] and mask
// [N, offset_group * kH * kW, oH, oW] when has_bias / has_mask (in that order); output [N, oC, oH, oW].
// With a workspace (workspace_bytes: one batch entry's sampled columns) each sample is taken once into
// columns [C * kH * kW, oH * oW] and a GEMM per group multiplies them by W; without one, a direct kernel
// samples per output element (oC times more bilinear samples).
class DeformConv : public Op {
 public:
  static Shape validate(const DeformConvConfig& cfg);
  static std::unique_ptr<DeformConv> create(Context& ctx, int device, const DeformConvConfig& cfg);
  std::string_view type() const override { return "DeformConv"; }
  std::string algorithm() const override;
  size_t workspace_bytes() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  DeformConvConfig cfg_;
  Shape out_;
  cl::Kernel kernel_, im2col_;
  std::unique_ptr<Op> gemm_;  // a cldl::Gemm of one group: [oC / group, K] x [K, oH * oW]
};

}  // namespace cldl
