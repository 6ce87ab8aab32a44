// libFuzzer target for the ONNX loader: bytes -> import_onnx_bytes -> prepare() (binding, sort, shape
// inference with host folding, fusion passes). No device is touched. Any cldl::Error is a clean
// rejection; every other exception, a crash, a sanitizer report or an out-of-memory is a finding.
// Built by tests/fuzz/CMakeLists.txt (clang, -fsanitize=fuzzer,address); run by the ctest `fuzz_onnx`.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/error.hpp"
#include "tests/fuzz/fuzz_load.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    cldl::fuzz::import_and_prepare(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const cldl::Error&) {
  }
  return 0;
}
