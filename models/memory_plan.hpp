// Liveness-based memory plan: every intermediate tensor (node output that is not a view) gets an offset
// in one arena per session; tensors whose lifetimes do not overlap share bytes.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "models/graph.hpp"

namespace cldl::graph {

struct MemoryPlan {
  struct Slot {
    size_t offset = 0, bytes = 0;
    size_t first = 0, last = 0;  // node indices: produced by `first`, last read by `last`
    // Nodes that read earlier occupants of these bytes: the producer must wait for them (a reader on
    // another queue may still be running).
    std::vector<size_t> wait_nodes;
  };
  std::map<std::string, Slot> slots;  // planned values (roots; views alias their root)
  std::map<std::string, std::string> view_root;  // view value -> the value whose bytes it uses
  size_t arena_bytes = 0;  // planned peak
  size_t total_bytes = 0;  // sum of all planned intermediates without reuse
};

// `view_of[node]`: the input whose bytes output 0 aliases, or -1; empty = from the op registry.
MemoryPlan plan_memory(const Graph& g, std::vector<int> view_of = {}, size_t alignment = 256);

}  // namespace cldl::graph
