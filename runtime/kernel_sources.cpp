// Lookup of embedded kernel sources with the CLDL_KERNEL_DIR override.
#include "runtime/kernel_sources.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "runtime/error.hpp"

namespace cldl {

std::string kernel_source(std::string_view file) {
  if (const char* dir = std::getenv("CLDL_KERNEL_DIR"); dir && *dir) {
    std::string path = std::string(dir) + "/" + std::string(file);
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("kernel file '{}' not found in CLDL_KERNEL_DIR ({})", file, dir);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  for (std::size_t i = 0; i < detail::kEmbeddedKernelCount; ++i)
    if (file == detail::kEmbeddedKernels[i].name) return detail::kEmbeddedKernels[i].source;
  fail("kernel file '{}' is not embedded in this build of cldl", file);
}

std::vector<std::string> kernel_files() {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < detail::kEmbeddedKernelCount; ++i) v.emplace_back(detail::kEmbeddedKernels[i].name);
  return v;
}

}  // namespace cldl
