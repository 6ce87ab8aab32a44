// NumPy .npy files <-> host tensors (format versions 1-3, little-endian, C order).
#pragma once
#include <string>

#include "runtime/tensor.hpp"

namespace cldl::graph {

HostTensor read_npy(const std::string& path);
void write_npy(const HostTensor& t, const std::string& path);
// Whether .npy has a dtype for `t` (not for bf16, the float8 / float4 formats, int4 / int2).
bool npy_supports(DType t);
// .npy or ONNX .pb by extension.
HostTensor read_tensor_file(const std::string& path);

}  // namespace cldl::graph
