// Plain C++ references for Det and DynamicQuantizeLinear, written from the ONNX spec, independent of the
// kernels: Det in double, DynamicQuantizeLinear in f32 steps as ONNX's reference computes it.
#pragma once
#include <cstdint>
#include <vector>

#include "cnn_ref.hpp"

namespace cldl::ref {

// Determinant of each trailing n x n matrix (Gaussian elimination with partial pivoting in double).
std::vector<double> det(const std::vector<double>& x, const Dims& d);
// scale = (max(0, max x) - min(0, min x)) / 255 in f32; zero point = saturate(rint(-min / scale));
// y = saturate(rint(x / scale) + zero point). All-zero x: scale 0, zero point 0, y 0.
void dynamic_quantize(const std::vector<float>& x, std::vector<uint8_t>& y, float& scale, uint8_t& zero_point);

}  // namespace cldl::ref
