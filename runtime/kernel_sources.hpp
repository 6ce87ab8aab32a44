// The kernels/*.cl sources embedded at build time, or read from CLDL_KERNEL_DIR while developing.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace cldl {
namespace detail {
struct EmbeddedKernel {
  const char* name;
  const char* source;
};
extern const EmbeddedKernel kEmbeddedKernels[];
extern const std::size_t kEmbeddedKernelCount;
}  // namespace detail

// Text of kernels/<file> ("gemm.cl"): from $CLDL_KERNEL_DIR/<file> when that variable is set, else the
// embedded copy. Throws Error naming the file when it is unknown.
std::string kernel_source(std::string_view file);
// Every embedded kernel file name.
std::vector<std::string> kernel_files();
}  // namespace cldl
