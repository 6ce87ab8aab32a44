// plan_memory: lifetimes from the topological order, then greedy-by-size placement (largest first,
// lowest offset that does not collide with a placed tensor alive at the same time).
#include "models/memory_plan.hpp"

#include <algorithm>
#include <set>

#include "models/op_registry.hpp"
#include "runtime/exec_context.hpp"

namespace cldl::graph {

MemoryPlan plan_memory(const Graph& g, std::vector<int> view_of, size_t alignment, std::vector<int> device_of) {
  MemoryPlan p;
  if (device_of.empty()) device_of.assign(g.nodes.size(), 0);
  if (device_of.size() != g.nodes.size())
    fail("plan_memory: {} node devices for {} nodes", device_of.size(), g.nodes.size());
  if (view_of.empty())
    for (auto& node : g.nodes) {
      const OpDef* d = find_op(node.op_type, node.domain);
      view_of.push_back(d ? d->view_of : -1);
    }
  const size_t n = g.nodes.size(), end = n + 1;  // graph outputs live past the last node
  auto root = [&](const std::string& v) {
    auto it = p.view_root.find(v);
    return it == p.view_root.end() ? v : it->second;
  };
  std::map<std::string, std::set<size_t>> readers;  // root -> nodes reading it or a view of it
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    for (auto& in : node.inputs)
      if (!in.empty()) readers[root(in)].insert(i);
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const std::string& v = node.outputs[o];
      if (v.empty()) continue;
      if (o == 0 && view_of[i] >= 0) {
        p.view_root[v] = root(node.inputs[size_t(view_of[i])]);
        continue;
      }
      const ValueInfo* info = g.info(v);
      MemoryPlan::Slot s;
      s.bytes = round_up(info ? size_t(info->shape.to_shape().numel()) * dtype_size(info->dtype) : 0, alignment);
      s.first = s.last = i;
      s.device = device_of[i];
      p.slots[v] = s;
    }
  }
  for (auto& [v, r] : readers) {
    auto it = p.slots.find(v);
    if (it == p.slots.end()) continue;
    it->second.last = std::max(it->second.last, *r.rbegin());
    for (auto reader : r) it->second.dedicated |= device_of[reader] != it->second.device;
  }
  for (auto& o : g.outputs)
    if (p.slots.count(root(o.name))) p.slots[root(o.name)].last = end;

  // Pointers into p.slots (a map: they stay valid), in its key order: the placement looks at every pair
  // of slots, and looking each up by name again was most of this function's time.
  std::vector<MemoryPlan::Slot*> order;
  for (auto& [v, s] : p.slots) {
    order.push_back(&s);
    p.total_bytes += s.bytes;
  }
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->bytes > b->bytes; });
  std::vector<const MemoryPlan::Slot*> placed;
  size_t dedicated_bytes = 0;
  for (MemoryPlan::Slot* sp : order) {
    auto& s = *sp;
    if (s.dedicated) {
      dedicated_bytes += s.bytes;
      continue;
    }
    std::vector<std::pair<size_t, size_t>> busy;
    for (const MemoryPlan::Slot* t : placed) {
      if (t->device == s.device && t->last >= s.first && s.last >= t->first)
        busy.emplace_back(t->offset, t->offset + t->bytes);
    }
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (auto& [b, e] : busy) {
      if (off + s.bytes <= b) break;
      off = std::max(off, e);
    }
    s.offset = off;
    if (p.device_arena_bytes.size() <= size_t(s.device)) p.device_arena_bytes.resize(size_t(s.device) + 1, 0);
    p.device_arena_bytes[size_t(s.device)] = std::max(p.device_arena_bytes[size_t(s.device)], off + s.bytes);
    placed.push_back(&s);
  }
  for (auto b : p.device_arena_bytes) p.arena_bytes += b;
  p.arena_bytes += dedicated_bytes;
  // Earlier occupants of overlapping bytes: their readers must finish before the new producer writes.
  for (auto& [v, s] : p.slots)
    for (auto& [u, t] : p.slots) {
      if (&t == &s || s.dedicated || t.dedicated || t.device != s.device || t.last >= s.first ||
          t.offset >= s.offset + s.bytes || s.offset >= t.offset + t.bytes)
        continue;
      s.wait_nodes.push_back(t.first);
      for (auto r : readers[u]) s.wait_nodes.push_back(r);
    }
  for (auto& [v, s] : p.slots) {
    std::sort(s.wait_nodes.begin(), s.wait_nodes.end());
    s.wait_nodes.erase(std::unique(s.wait_nodes.begin(), s.wait_nodes.end()), s.wait_nodes.end());
  }
  return p;
}

}  // namespace cldl::graph
