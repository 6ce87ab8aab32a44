// Helpers shared by the conv sources (layers/conv*.cpp); not part of the public API.
#pragma once
#include <string_view>
#include <vector>

#include "layers/conv.hpp"

namespace cldl::detail {

// The int16 geometry argument of kernels/conv.cl (layout: G_* macros there).
cl_int16 geometry_arg(const ConvGeometry& g);
// A flat view of `t` starting `start_elems` elements further in, to its end.
Tensor view(const Tensor& t, int64_t start_elems);
// Ranks, strides, dilations and explicit pads of Conv/ConvTranspose into `g` (N, C, H, W, KH, KW, S*, D*, P*).
void parse_spatial(std::string_view op, const Shape& in, const Shape& w, const std::vector<int64_t>& strides,
                   const std::vector<int64_t>& dilations, const std::vector<int64_t>& pads, ConvGeometry& g);
void check_tensor(std::string_view op, std::string_view what, const HostTensor& t, const Shape& want);

}  // namespace cldl::detail
