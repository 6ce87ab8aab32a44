// Liveness-based memory plan: every intermediate tensor (node output that is not a view) gets an offset
// in one arena per session and device; tensors whose lifetimes do not overlap share bytes. A tensor read
// on a device other than its producer's gets a buffer of its own (`dedicated`) instead: OpenCL leaves a
// buffer that two devices use at once (one writing) undefined, and migrates whole buffers, never ranges.
#pragma once
#include <cstddef>
#include <map>
#include <set>
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
    int device = 0;          // its producer's device: the arena it lives in
    bool dedicated = false;  // read on another device: its own buffer, outside every arena
  };
  std::map<std::string, Slot> slots;  // planned values (roots; views alias their root)
  std::map<std::string, std::string> view_root;  // view value -> the value whose bytes it uses
  // In-place concatenation: Concat nodes whose inputs (its parts) are written by their producers straight
  // into their place in the output (a part's slot lies inside the output's, at that offset; the output's
  // lifetime covers the parts'); the other inputs are copied there. `concat_parts` maps a part to (the
  // outermost output holding it, offset). That output may be a graph output: bound to a buffer of the
  // caller's, its parts are written there (Session::set_slot_tensor).
  std::set<size_t> in_place_concats;
  std::map<std::string, std::pair<std::string, size_t>> concat_parts;
  std::map<size_t, std::vector<std::pair<size_t, size_t>>> concat_copies;  // node -> (input, byte offset) to copy
  // In-place Slice and Split: outputs that are one contiguous block of their input (one device, the dims
  // before the axis all 1, step 1, a 16-byte aligned offset, not a graph output) are views of it at that
  // byte offset, and the node runs no kernel.
  std::set<size_t> in_place_slices;
  std::map<std::string, size_t> view_offset;  // such an output -> its byte offset in its input
  size_t arena_bytes = 0;  // planned peak (all devices' arenas and the dedicated buffers together)
  size_t total_bytes = 0;  // sum of all planned intermediates without reuse
  std::vector<size_t> device_arena_bytes;  // arena size per device index (0 where none)
};

// `view_of[node]`: the input whose bytes output 0 aliases, or -1; empty = from the op registry.
// `device_of[node]`: the device each node runs on; empty = every node on device 0.
MemoryPlan plan_memory(const Graph& g, std::vector<int> view_of = {}, size_t alignment = 256,
                       std::vector<int> device_of = {});

}  // namespace cldl::graph
