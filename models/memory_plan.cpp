// plan_memory: lifetimes from the topological order, then greedy-by-size placement (largest first,
// lowest offset that does not collide with a placed tensor alive at the same time).
#include "models/memory_plan.hpp"

#include <algorithm>
#include <optional>
#include <set>

#include "models/op_registry.hpp"
#include "runtime/exec_context.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {

namespace {

constexpr size_t kPartAlign = 16;

// In-place pieces need every node on one device (a part read on another device would need its own buffer).
bool one_device(const std::vector<int>& device_of) {
  return std::all_of(device_of.begin(), device_of.end(), [&](int d) { return d == device_of.front(); });
}

// Graph outputs and the values they are views of (an Identity or Reshape at the end).
std::set<std::string> output_sources(const Graph& g, const std::vector<int>& view_of) {
  std::map<std::string, std::string> view_src;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (view_of[i] >= 0 && !g.nodes[i].outputs.empty())
      view_src[g.nodes[i].outputs[0]] = g.nodes[i].inputs.at(size_t(view_of[i]));
  std::set<std::string> outputs;
  for (auto& o : g.outputs)
    for (std::string v = o.name; outputs.insert(v).second && view_src.count(v);) v = view_src.at(v);
  return outputs;
}

// The start along the one sliced axis of a Slice whose other axes are whole and whose step is 1, or -1.
int64_t slice_start(const Graph& g, const Node& node, const Shape& in, const Shape& out, int64_t& axis) {
  std::vector<int64_t> starts, axes, steps;
  if (node.opset < 10) {
    starts = node.attr_ints("starts");
    axes = node.attr_ints("axes");
  } else {
    auto ints = [&](size_t k) -> std::optional<std::vector<int64_t>> {
      if (node.input_count() <= k || node.input(k).empty()) return std::vector<int64_t>{};
      auto it = g.initializers.find(node.input(k));
      if (it == g.initializers.end()) return std::nullopt;
      return to_ints(it->second);
    };
    auto st = ints(1), ax = ints(3), sp = ints(4);
    if (!st || !ax || !sp) return -1;
    starts = *st, axes = *ax, steps = *sp;
  }
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(int64_t(k));
  if (axes.size() != starts.size() || (!steps.empty() && steps.size() != starts.size())) return -1;
  axis = -1;
  int64_t start = 0;
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = axes[k] < 0 ? axes[k] + int64_t(in.rank()) : axes[k];
    if (a < 0 || a >= int64_t(in.rank()) || (!steps.empty() && steps[k] != 1)) return -1;
    const int64_t dim = in[size_t(a)];
    const int64_t s0 = std::clamp(starts[k] < 0 ? starts[k] + dim : starts[k], int64_t(0), dim);
    if (out[size_t(a)] == dim && s0 == 0) continue;  // whole
    if (axis >= 0) return -1;                         // a second sliced axis
    axis = a, start = s0;
  }
  return axis < 0 ? -1 : start;
}

// Which Slice / Split nodes are views (MemoryPlan::in_place_slices, view_offset).
void plan_in_place_slices(const Graph& g, const std::vector<int>& view_of, const std::vector<int>& device_of,
                          MemoryPlan& p) {
  if (!one_device(device_of)) return;
  const std::set<std::string> outputs = output_sources(g, view_of);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    if ((node.op_type != "Slice" && node.op_type != "Split") || !node.domain.empty() || node.inputs.empty()) continue;
    const ValueInfo* in = g.info(node.input(0));
    if (!in || !in->shape.is_static() || g.initializers.count(node.input(0))) continue;
    const Shape is = in->shape.to_shape();
    const size_t es = dtype_size(in->dtype);
    std::vector<std::pair<std::string, size_t>> views;
    bool ok = true;
    int64_t along = 0;  // Split: the axis position of the next output
    for (auto& o : node.outputs) {
      const ValueInfo* info = o.empty() ? nullptr : g.info(o);
      ok = ok && info && info->shape.is_static() && !outputs.count(o) && info->shape.to_shape().rank() == is.rank();
      if (!ok) break;
      const Shape os = info->shape.to_shape();
      int64_t axis = -1, start = -1;
      if (node.op_type == "Slice") {
        start = slice_start(g, node, is, os, axis);
      } else {
        axis = node.attr_i("axis", 0);
        if (axis < 0) axis += int64_t(is.rank());
        start = along;
        along += axis >= 0 && axis < int64_t(is.rank()) ? os[size_t(axis)] : 0;
      }
      ok = start >= 0 && axis >= 0 && axis < int64_t(is.rank());
      for (int64_t d = 0; ok && d < int64_t(is.rank()); ++d)
        ok = d < axis ? is[size_t(d)] == 1 : d == axis || os[size_t(d)] == is[size_t(d)];
      if (!ok) break;
      size_t inner = es;
      for (size_t d = size_t(axis) + 1; d < is.rank(); ++d) inner *= size_t(is[d]);
      const size_t off = size_t(start) * inner;
      ok = off % kPartAlign == 0 && off + size_t(os.numel()) * es <= size_t(is.numel()) * es;
      if (ok) views.emplace_back(o, off);
    }
    if (!ok || views.empty()) continue;
    p.in_place_slices.insert(i);
    for (auto& [o, off] : views) p.view_offset[o] = off;
  }
}

// Which Concat nodes write their inputs in place (MemoryPlan::in_place_concats): one device; the output's
// dims before the axis all 1 (each input is then one contiguous block of it). An input is a part, written
// by its producer straight into the output, where a kernel of its own writes it (not a view, input,
// constant or graph output), no other Concat reads it and it sits at an offset that is a multiple of 16
// bytes; the others are copied there (concat_copies). A Concat whose output is a part of a later one nests
// in it. (Kernels
// take any element offset; clFFT's sub-buffers, which need the device's base-address alignment, are made
// only in workspaces. The plan's 256 bytes would leave out ShuffleNet's halves of 58 x 28 x 28 floats.)
void plan_in_place_concats(const Graph& g, const std::vector<int>& view_of, const std::vector<int>& device_of,
                           MemoryPlan& p) {
  if (!one_device(device_of)) return;
  std::map<std::string, size_t> producer, concat_reads;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
    if (g.nodes[i].op_type == "Concat")
      for (auto& in : g.nodes[i].inputs) ++concat_reads[in];
  }
  const std::set<std::string> outputs = output_sources(g, view_of);
  std::map<std::string, std::pair<std::string, size_t>> parent;  // part -> (concat output, offset)
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    // A graph output too: when a session binds it to a buffer of the app's (Session::bind_output), the
    // parts follow it there (Session::set_slot_tensor), so an RNN's state outputs are written in place.
    if (node.op_type != "Concat" || !node.domain.empty() || node.outputs.size() != 1 || node.inputs.empty())
      continue;
    const ValueInfo* out = g.info(node.outputs[0]);
    if (!out || !out->shape.is_static()) continue;
    const Shape ys = out->shape.to_shape();
    int64_t axis = node.attr_i("axis", 0);
    if (axis < 0) axis += int64_t(ys.rank());
    if (axis < 0 || axis >= int64_t(ys.rank())) continue;
    bool ok = true;
    for (int64_t d = 0; d < axis; ++d) ok = ok && ys[size_t(d)] == 1;
    // A batch > 1 (or any dim before the axis > 1) makes each input strided blocks of the output, which
    // no producer writes yet: the Concat copies them (a logged choice).
    if (!ok && log::level() >= log::Level::debug)
      log::debug("{}: copies its inputs (output {}: the dims before axis {} are not all 1, so an input is "
                 "strided blocks of it)",
                 node.describe(), ys.str(), axis);
    std::vector<std::pair<std::string, size_t>> parts;
    std::vector<std::pair<size_t, size_t>> copies;
    size_t offset = 0;
    for (size_t k = 0; ok && k < node.inputs.size(); ++k) {
      const std::string& in = node.inputs[k];
      const ValueInfo* info = in.empty() ? nullptr : g.info(in);
      if (!info || !info->shape.is_static()) ok = false;
      if (!ok) break;
      auto pr = producer.find(in);
      const bool part = pr != producer.end() && !g.initializers.count(in) && !g.is_input(in) && !outputs.count(in) &&
                        concat_reads[in] == 1 && view_of[pr->second] < 0 && !p.in_place_slices.count(pr->second) &&
                        offset % kPartAlign == 0;
      if (part)
        parts.emplace_back(in, offset);
      else
        copies.emplace_back(k, offset);
      offset += size_t(info->shape.to_shape().numel()) * dtype_size(info->dtype);
    }
    if (!ok || parts.empty()) continue;
    p.in_place_concats.insert(i);
    if (!copies.empty()) p.concat_copies[i] = std::move(copies);
    for (auto& [in, off] : parts) parent[in] = {node.outputs[0], off};
  }
  // Each part's outermost holder and its offset there (nested concats add up).
  for (auto& [v, where] : parent) {
    auto [holder, off] = where;
    for (auto it = parent.find(holder); it != parent.end(); it = parent.find(holder)) {
      off += it->second.second;
      holder = it->second.first;
    }
    p.concat_parts[v] = {holder, off};
  }
}

}  // namespace

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
  plan_in_place_slices(g, view_of, device_of, p);
  plan_in_place_concats(g, view_of, device_of, p);
  auto root = [&](const std::string& v) {
    auto it = p.view_root.find(v);
    return it == p.view_root.end() ? v : it->second;
  };
  std::map<std::string, size_t> first_part;  // outermost concat output -> its earliest part's producer
  std::map<std::string, size_t> part_producer;
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
      if (p.view_offset.count(v)) {  // an in-place Slice / Split: a view of its input at an offset
        p.view_root[v] = root(node.inputs[0]);
        continue;
      }
      if (auto part = p.concat_parts.find(v); part != p.concat_parts.end()) {  // placed with its concat output
        p.view_root[v] = part->second.first;
        first_part.try_emplace(part->second.first, i);
        part_producer[v] = i;
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
  for (auto& [v, i] : first_part) p.slots.at(v).first = std::min(p.slots.at(v).first, i);

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
  // The parts of in-place concatenations: slots inside their outermost output's, from their producer on.
  for (auto& [v, where] : p.concat_parts) {
    const MemoryPlan::Slot& outer = p.slots.at(where.first);
    const ValueInfo* info = g.info(v);
    MemoryPlan::Slot s = outer;
    s.offset = outer.offset + where.second;
    s.bytes = size_t(info->shape.to_shape().numel()) * dtype_size(info->dtype);
    s.wait_nodes.clear();
    s.first = part_producer.at(v);
    p.slots[v] = s;
  }
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
