// NumPy .npy files <-> host tensors (format versions 1-3, little-endian, C order).
#pragma once
#include <string>

#include "runtime/tensor.hpp"

namespace cldl::graph {

HostTensor read_npy(const std::string& path);
void write_npy(const HostTensor& t, const std::string& path);
// .npy or ONNX .pb by extension.
HostTensor read_tensor_file(const std::string& path);

}  // namespace cldl::graph
