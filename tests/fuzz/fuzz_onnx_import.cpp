// libFuzzer target for the ONNX loader: bytes -> import_onnx_bytes -> prepare() (binding, sort, shape
// inference with host folding, fusion passes). No device is touched. Any cldl::Error is a clean
// rejection; every other exception, a crash, a sanitizer report or an out-of-memory is a finding.
// Built by tests/fuzz/CMakeLists.txt (clang, -fsanitize=fuzzer,address); run by the ctest `fuzz_onnx`.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/onnx_import.hpp"
#include "models/passes.hpp"
#include "runtime/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    cldl::graph::Graph g = cldl::graph::import_onnx_bytes(std::string(reinterpret_cast<const char*>(data), size),
                                                          "/nonexistent-fuzz-dir", "fuzz input");
    // Symbolic dims get a small value so inference goes on past the inputs.
    cldl::graph::PrepareOptions po;
    for (auto& in : g.inputs)
      for (auto& s : in.shape.symbols)
        if (!s.empty()) po.dims[s] = 2;
    for (auto& in : g.inputs)
      for (size_t i = 0; i < in.shape.dims.size(); ++i)
        if (in.shape.dims[i] < 0 && (i >= in.shape.symbols.size() || in.shape.symbols[i].empty())) in.shape.dims[i] = 2;
    cldl::graph::prepare(g, po);
  } catch (const cldl::Error&) {
  }
  return 0;
}
