// Helpers for tests that look at what the passes made of a graph.
#pragma once
#include <cstdlib>
#include <string>

#include "models/graph.hpp"
#include "models/passes.hpp"

namespace cldl::test {

// How many nodes of `g` have op type `op`.
inline int count_ops(const graph::Graph& g, const std::string& op) {
  int n = 0;
  for (auto& node : g.nodes) n += node.op_type == op;
  return n;
}

// prepare(g), with the fusion passes named in `skip` (comma-separated; empty: none) left out through
// CLDL_SKIP_PASSES, which is unset again afterwards (also when prepare throws).
inline void prepare_skipping(graph::Graph& g, const std::string& skip) {
  if (!skip.empty()) setenv("CLDL_SKIP_PASSES", skip.c_str(), 1);
  struct Unset {
    ~Unset() { unsetenv("CLDL_SKIP_PASSES"); }
  } unset;
  graph::prepare(g);
}

}  // namespace cldl::test
