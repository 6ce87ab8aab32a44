// Helpers for tests that look at what the passes made of a graph.
#pragma once
#include <string>

#include "models/graph.hpp"

namespace cldl::test {

// How many nodes of `g` have op type `op`.
inline int count_ops(const graph::Graph& g, const std::string& op) {
  int n = 0;
  for (auto& node : g.nodes) n += node.op_type == op;
  return n;
}

}  // namespace cldl::test
