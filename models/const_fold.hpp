// General constant folding: every node whose inputs are all constant (initializers, or outputs of nodes
// folded before it) and that has a device implementation is evaluated once when a plan is made, on the
// plan's device, and its outputs become initializers; the host folders of passes.cpp cover the shape
// subgraphs before this. Random ops are never folded; products over kMaxFoldBytes (or, together, four
// times that) and graph outputs stay run-time work. Model::make_plan calls it after the graph passes.
#pragma once
#include <memory>

#include "models/executor.hpp"

namespace cldl::graph {

inline constexpr int64_t kMaxFoldBytes = int64_t(64) << 20;

// Returns how many nodes were folded (0 when none could be, or their evaluation failed: logged, and they
// stay in the graph).
size_t fold_constants_on_device(const std::shared_ptr<Context>& ctx, Graph& g, const CompileOptions& opts);

}  // namespace cldl::graph
