// Plain C++ references for the vision ops (NonMaxSuppression, RoiAlign, GridSample, AffineGrid, CenterCropPad,
// Col2Im, DeformConv), written from the ONNX spec and its reference implementation for clarity, in double (NMS in
// float, whose thresholds decide exactly as ONNX Runtime's do), independent of the kernels and of the host fold in
// models/ops_vision.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cnn_ref.hpp"

namespace cldl::ref {

// Selected (batch, class, box) rows, flattened. boxes [B, N, 4], scores [B, C, N].
std::vector<int64_t> nms(const std::vector<float>& boxes, const std::vector<float>& scores, int64_t batches,
                         int64_t classes, int64_t n, int64_t max_per_class, float iou_threshold,
                         std::optional<float> score_threshold, bool center_point_box);

// x [N, C, H, W], rois [R, 4], batch indices [R]; output [R, C, oh, ow].
std::vector<double> roi_align(const std::vector<double>& x, const Dims& xd, const std::vector<double>& rois,
                              const std::vector<int64_t>& batch, int64_t oh, int64_t ow, int64_t sampling_ratio,
                              double spatial_scale, bool half_pixel, bool max_mode);

// x [N, C, D...] (1 to 3 spatial dims), grid [N, P..., k]; mode "linear" / "nearest" / "cubic", padding
// "zeros" / "border" / "reflection".
std::vector<double> grid_sample(const std::vector<double>& x, const Dims& xd, const std::vector<double>& grid,
                                const Dims& gd, const std::string& mode, const std::string& padding,
                                bool align_corners);

// theta [N, k, k + 1]; size [N, C, D...]; output [N, D..., k].
std::vector<double> affine_grid(const std::vector<double>& theta, const Dims& size, bool align_corners);

// Crops / zero-pads each of `axes` (all when empty) to `shape` around the centre.
std::vector<double> center_crop_pad(const std::vector<double>& x, const Dims& xd, const Dims& shape,
                                    std::vector<int64_t> axes, Dims& od);

// x [N, C * prod(block), L]; output [N, C, image...].
std::vector<double> col2im(const std::vector<double>& x, const Dims& xd, const Dims& image, const Dims& block,
                           const Dims& dilations, const Dims& pads, const Dims& strides);

// 2-D deformable convolution: x [N, C, H, W], w [oC, C / group, kH, kW], offset [N, og * 2 * kH * kW, oH, oW],
// bias [oC] or empty, mask [N, og * kH * kW, oH, oW] or empty; strides, pads (4), dilations.
std::vector<double> deform_conv(const std::vector<double>& x, const Dims& xd, const std::vector<double>& w,
                                const Dims& wd, const std::vector<double>& offset, const std::vector<double>& bias,
                                const std::vector<double>& mask, int64_t group, int64_t offset_group,
                                const Dims& strides, const Dims& pads, const Dims& dilations, Dims& od);

}  // namespace cldl::ref
