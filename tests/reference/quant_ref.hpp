// Plain C++ references for the quantization ops (layers/quant.hpp): scale lookup by coordinates, float
// division and std::nearbyint (round half to even), int64 accumulation, requantisation in double as the
// ONNX reference (numpy) does. Independent of the kernels.
#pragma once
#include <cstdint>
#include <vector>

#include "cnn_ref.hpp"

namespace cldl::ref {

// Index into the scale / zero point for element i of x: per tensor (scale numel 1), per axis (1-D scale),
// or blocked (scale of x's rank, ceil(x[axis] / block) along axis).
int64_t quant_param_index(int64_t i, const Dims& xd, const Dims& sd, int axis, int block);

// QuantizeLinear to an integer type with range [lo, hi]; zp empty = no zero point. NaN gives lo.
std::vector<int> quantize_int(const std::vector<float>& x, const Dims& xd, const std::vector<float>& scale,
                              const Dims& sd, const std::vector<int>& zp, int axis, int block, int lo, int hi);
// QuantizeLinear to a float8 / float4 type (codes; runtime/minifloat's host codec), no zero point.
std::vector<uint8_t> quantize_minifloat(const std::vector<float>& x, const Dims& xd, const std::vector<float>& scale,
                                        const Dims& sd, DType t, bool saturate, int axis, int block);
// DequantizeLinear: (x - zp) * scale in float; x and zp as their exact values.
std::vector<float> dequantize(const std::vector<double>& x, const Dims& xd, const std::vector<float>& scale,
                              const Dims& sd, const std::vector<double>& zp, int axis, int block);

// (A - azp) x (B - bzp) with numpy matmul shapes; azp / bzp empty, one value, or per row / column.
std::vector<int32_t> matmul_integer(const std::vector<int>& a, const Dims& da, const std::vector<int>& b,
                                    const Dims& db, const std::vector<int>& azp, const std::vector<int>& bzp,
                                    Dims& out_dims);

// ConvInteger over 1 to 3 spatial dims: x [N, C, ...], w [M, C / group, ...]; pads begins then ends.
// wzp empty, one value, or one per output channel.
std::vector<int32_t> conv_integer(const std::vector<int>& x, const Dims& xd, const std::vector<int>& w, const Dims& wd,
                                  int xzp, const std::vector<int>& wzp, const Dims& strides, const Dims& dilations,
                                  const Dims& pads, int group, Dims& out_dims);

// saturate(nearbyint(double(acc) * double(m)) + zp) into [lo, hi], as numpy evaluates QLinearMatMul.
int requantize(int32_t acc, float m, int zp, int lo, int hi);

}  // namespace cldl::ref
