// What the ONNX-loader fuzz target does with one input, shared with the regression test that replays
// tests/fuzz/regressions in the normal suite: import, bind every open input dim to 2 so inference goes on
// past the inputs, prepare (sort, inference with host folding, fusion passes). No device is touched; a
// clean rejection is a thrown cldl::Error.
#pragma once
#include <string>

#include "models/onnx_import.hpp"
#include "models/passes.hpp"

namespace cldl::fuzz {

inline void import_and_prepare(const std::string& bytes) {
  graph::Graph g = graph::import_onnx_bytes(bytes, "/nonexistent-fuzz-dir", "fuzz input");
  graph::PrepareOptions po;
  for (auto& in : g.inputs)
    for (auto& s : in.shape.symbols)
      if (!s.empty()) po.dims[s] = 2;
  for (auto& in : g.inputs)
    for (size_t i = 0; i < in.shape.dims.size(); ++i)
      if (in.shape.dims[i] < 0 && (i >= in.shape.symbols.size() || in.shape.symbols[i].empty())) in.shape.dims[i] = 2;
  graph::prepare(g, po);
}

}  // namespace cldl::fuzz
