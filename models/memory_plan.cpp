// plan_memory: lifetimes from the topological order, then greedy-by-size placement (largest first,
// lowest offset that does not collide with a placed tensor alive at the same time).
#include "models/memory_plan.hpp"

#include <algorithm>
#include <set>

#include "models/op_registry.hpp"
#include "runtime/exec_context.hpp"

namespace cldl::graph {

MemoryPlan plan_memory(const Graph& g, std::vector<int> view_of, size_t alignment) {
  MemoryPlan p;
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
      p.slots[v] = s;
    }
  }
  for (auto& [v, r] : readers)
    if (p.slots.count(v)) p.slots[v].last = std::max(p.slots[v].last, *r.rbegin());
  for (auto& o : g.outputs)
    if (p.slots.count(root(o.name))) p.slots[root(o.name)].last = end;

  std::vector<std::string> order;
  for (auto& [v, s] : p.slots) {
    order.push_back(v);
    p.total_bytes += s.bytes;
  }
  std::stable_sort(order.begin(), order.end(), [&](auto& a, auto& b) { return p.slots[a].bytes > p.slots[b].bytes; });
  std::vector<std::string> placed;
  for (auto& v : order) {
    auto& s = p.slots[v];
    std::vector<std::pair<size_t, size_t>> busy;
    for (auto& u : placed) {
      auto& t = p.slots[u];
      if (t.last >= s.first && s.last >= t.first) busy.emplace_back(t.offset, t.offset + t.bytes);
    }
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (auto& [b, e] : busy) {
      if (off + s.bytes <= b) break;
      off = std::max(off, e);
    }
    s.offset = off;
    p.arena_bytes = std::max(p.arena_bytes, off + s.bytes);
    placed.push_back(v);
  }
  // Earlier occupants of overlapping bytes: their readers must finish before the new producer writes.
  for (auto& [v, s] : p.slots)
    for (auto& [u, t] : p.slots) {
      if (u == v || t.last >= s.first || t.offset >= s.offset + s.bytes || s.offset >= t.offset + t.bytes) continue;
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
