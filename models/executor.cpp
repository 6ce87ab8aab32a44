// CompiledModel (lowering, queue assignment, memory plan) and Session::run (event-scheduled enqueue).
#include "models/executor.hpp"

#include <algorithm>
#include <atomic>
#include <functional>
#include <set>
#include <string_view>

#include "models/plan_phases.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {

namespace {

// Glob over a node name: '*' any run of characters (also none), '?' one character.
// A Concat of the memory plan's in-place concatenations: its parts' producers wrote them into its output,
// and it copies the other inputs in. The step stays (with no command when there is nothing to copy), so
// what waits for the output waits for every input's producer.
class InPlaceConcat : public NodeKernel {
 public:
  InPlaceConcat(Context& cx, std::vector<std::pair<size_t, size_t>> copies) : cx_(&cx), copies_(std::move(copies)) {}
  std::string algorithm() const override {
    return copies_.empty() ? "in place (inputs written into the output)"
                           : fmt::format("in place, {} input(s) copied in", copies_.size());
  }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    for (auto [k, off] : copies_) {  // inputs that are not parts: one contiguous block each
      Tensor dst = out[0];
      dst.offset_bytes += off;
      dst.shape = in[k].shape;
      cx_->copy_async(in[k], dst, ec);
    }
  }

 private:
  Context* cx_;
  std::vector<std::pair<size_t, size_t>> copies_;
};

// A node all of whose outputs have no elements: nothing to compute, whatever its inputs (a MatMul of
// [0, K] rows, a LayerNorm over an empty batch). The step stays, so readers still wait for its inputs.
class NothingToCompute : public NodeKernel {
 public:
  std::string algorithm() const override { return "nothing to compute (empty outputs)"; }
  void enqueue(std::span<const Tensor>, std::span<const Tensor>, ExecutionContext&) override {}
};

bool all_outputs_empty(const Graph& g, const Node& n) {
  bool any = false;
  for (auto& v : n.outputs) {
    if (v.empty()) continue;
    const ValueInfo* info = g.info(v);
    if (!info || !info->shape.is_static() || info->shape.to_shape().numel() != 0) return false;
    any = true;
  }
  return any;
}

bool glob_match(std::string_view pat, std::string_view s) {
  size_t p = 0, i = 0, star = std::string_view::npos, mark = 0;
  while (i < s.size()) {
    if (p < pat.size() && (pat[p] == '?' || pat[p] == s[i])) {
      ++p, ++i;
    } else if (p < pat.size() && pat[p] == '*') {
      star = p++, mark = i;
    } else if (star != std::string_view::npos) {
      p = star + 1, i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

bool rule_matches(const std::string& pattern, const Node& n) {
  if (pattern.rfind("op:", 0) == 0) return n.op_type == pattern.substr(3);
  if (pattern.find_first_of("*?") != std::string::npos) return glob_match(pattern, n.name);
  return n.name == pattern;
}

}  // namespace

int queues_for(const CompileOptions& opts, const DeviceInfo& info) {
  if (opts.queues > 0) return opts.queues;
  return info.type == DeviceType::cpu ? 1 : 2;
}

std::vector<int> resolve_placement(const Graph& g, const CompileOptions& opts, size_t device_count) {
  auto device_list = [&] {
    return fmt::format("the context has {} device{}", device_count, device_count == 1 ? "" : "s");
  };
  if (opts.device < 0 || size_t(opts.device) >= device_count)
    fail("compile: device {} does not exist ({})", opts.device, device_list());
  std::vector<int> dev(g.nodes.size(), opts.device);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!n.has(kDeviceAttr)) continue;
    const int64_t d = placed_device(n);
    if (d < 0 || size_t(d) >= device_count)
      fail("{}: placed on device {} ({}), which does not exist ({})", n.describe(), d, kDeviceAttr, device_list());
    dev[i] = int(d);
  }
  for (auto& [pattern, d] : opts.placement) {
    if (pattern.empty() || pattern == "op:") fail("placement rule '={}': empty node pattern", d);
    if (d < 0 || size_t(d) >= device_count)
      fail("placement rule '{}={}': device {} does not exist ({}{})", pattern, d, d, device_list(),
           device_count == 1 ? "; give several, e.g. --device cpu:0,cpu:1" : "");
    bool any = false;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      if (rule_matches(pattern, g.nodes[i])) dev[i] = d, any = true;
    if (!any) {
      const bool by_op = pattern.rfind("op:", 0) == 0;
      std::vector<std::string> names;
      if (by_op) {
        std::set<std::string> types;
        for (auto& n : g.nodes) types.insert(n.op_type);
        names.assign(types.begin(), types.end());
      } else {
        for (auto& n : g.nodes) names.push_back(n.name);
      }
      if (names.size() > 12) names.resize(12), names.push_back("...");
      fail("placement rule '{}={}' matches no {} of graph '{}' (after the graph passes; it has {}: {})", pattern, d,
           by_op ? "op type" : "node", g.name, by_op ? "op types" : "nodes", fmt::join(names, ", "));
    }
  }
  return dev;
}

std::pair<std::string, int> parse_placement_rule(const std::string& text) {
  auto eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    fail("placement '{}' should be NODE=DEVICE (a node name, a glob such as 'conv*', or op:TYPE; a device index)",
         text);
  std::string dev = text.substr(eq + 1);
  if (dev.find_first_not_of("0123456789") != std::string::npos || dev.size() > 6)
    fail("placement '{}': device '{}' is not a device index (0, 1, ...)", text, dev);
  return {text.substr(0, eq), std::stoi(dev)};
}

void ConstantCache::allow(const HostTensor& t) {
  std::lock_guard lock(mu_);
  if (t.storage_id()) allowed_.emplace(t.storage_id(), t);
}

Tensor ConstantCache::find_or_upload(Context& ctx, const HostTensor& t, int device) {
  std::lock_guard lock(mu_);
  auto a = allowed_.find(t.storage_id());
  if (!t.storage_id() || a == allowed_.end() || a->second.dtype() != t.dtype() || a->second.bytes() != t.bytes())
    return {};
  auto key = std::make_pair(t.storage_id(), device);
  auto it = device_.find(key);
  if (it == device_.end()) it = device_.emplace(key, ctx.upload(t, device)).first;
  Tensor r = it->second;
  r.shape = t.shape();  // the same bytes under another shape (a reshaped initializer)
  return r;
}

Tensor ConstantCache::derived(Context& ctx, const HostTensor& from, const std::string& kind, int device,
                              const std::function<HostTensor()>& make) {
  {
    std::lock_guard lock(mu_);
    if (!from.storage_id() || !allowed_.count(from.storage_id())) return ctx.upload(make(), device);
    auto it = derived_.find({from.storage_id(), kind, device});
    if (it != derived_.end()) return it->second;
  }
  Tensor t = ctx.upload(make(), device);  // outside the lock: a transpose of a large weight takes a while
  std::lock_guard lock(mu_);
  return derived_.emplace(std::make_tuple(from.storage_id(), kind, device), t).first->second;
}

std::shared_ptr<CompiledModel> CompiledModel::compile(std::shared_ptr<Context> ctx, Graph g, const CompileOptions& opts) {
  auto m = std::shared_ptr<CompiledModel>(new CompiledModel());
  m->ctx_ = std::move(ctx);
  m->graph_ = std::move(g);
  m->opts_ = opts;
  Graph& gr = m->graph_;
  Context& cx = *m->ctx_;
  m->node_device_ = resolve_placement(gr, opts, cx.device_count());
  const std::vector<int>& node_dev = m->node_device_;

  std::vector<int> view_of(gr.nodes.size(), -1);
  std::vector<const OpDef*> defs;
  for (size_t i = 0; i < gr.nodes.size(); ++i) {
    const Node& n = gr.nodes[i];
    const OpDef* d = find_op(n.op_type, n.domain);
    if (!d) fail("{}: unsupported op '{}' (no device implementation)", n.describe(), n.op_type);
    if (d->view_of < 0 && !d->lower)
      fail("{}: unsupported op '{}' on device: it runs on the host only at load time", n.describe(), n.op_type);
    defs.push_back(d);
    view_of[i] = d->view_of;
  }
  {
    PhaseTimer t(&PlanPhases::memory_plan_ms);
    m->plan_ = plan_memory(gr, view_of, 256, node_dev);
  }

  auto add_slot = [&](Slot s) {
    m->slot_of_.emplace(s.name, int(m->slots_.size()));  // a constant's first copy keeps the name
    m->slots_.push_back(std::move(s));
    return int(m->slots_.size() - 1);
  };
  for (auto& in : gr.inputs) {
    Slot s{Kind::input, in.name, in.shape.to_shape(), in.dtype};
    s.device = opts.device;
    add_slot(std::move(s));
  }
  // A constant gets one slot (and one upload) per device that reads it.
  std::vector<cl::Event> uploads;
  std::set<int> upload_queues;
  auto wait_uploads = [&] {
    PhaseTimer t(&PlanPhases::constants_ms);
    for (int d : upload_queues) check(cx.queue(d).flush(), "clFlush", "plan constants");
    if (!uploads.empty()) check(cl::Event::waitForEvents(uploads), "clWaitForEvents", "plan constants");
    uploads.clear();
  };
  struct UploadsDone {  // a lowering that throws still lets the writes finish before the graph goes
    std::function<void()> wait;
    ~UploadsDone() {
      try {
        wait();
      } catch (...) {
      }
    }
  } uploads_done{wait_uploads};
  auto slot_for = [&](const std::string& v, int device) -> int {
    if (v.empty()) return -1;
    auto it = m->slot_of_.find(v);
    if (it != m->slot_of_.end() && m->slots_[size_t(it->second)].kind != Kind::constant) return it->second;
    auto ci = gr.initializers.find(v);
    if (ci == gr.initializers.end()) fail("compile: value '{}' is not defined", v);
    auto key = std::make_pair(v, device);
    if (auto cit = m->constant_slot_.find(key); cit != m->constant_slot_.end()) return cit->second;
    Slot cs{Kind::constant, v, ci->second.shape(), ci->second.dtype()};
    cs.device = device;
    int s = add_slot(std::move(cs));
    Tensor shared = opts.constants ? opts.constants->find_or_upload(cx, ci->second, device) : Tensor{};
    if (!shared.valid()) {
      // The plan's own constant: written without blocking, all of them waited for once at the end (each
      // blocking write waits for a driver thread, up to a ms on a busy CPU). The bytes stay in the plan's
      // graph meanwhile.
      const HostTensor& h = ci->second;
      shared = cx.alloc(h.shape(), h.dtype(), device);
      if (h.bytes()) {
        PhaseTimer t(&PlanPhases::constants_ms);
        ExecutionContext ec(cx.queue(device));
        ec.label = "constant " + v;
        ec.signal = &uploads.emplace_back();
        cx.write_async(shared, h.data(), h.bytes(), ec);
        upload_queues.insert(device);
      }
    }
    m->constants_[s] = shared;
    m->constant_slot_[key] = s;
    return s;
  };

  // Queue assignment (per device): a node continues the queue of its first producer on the same device
  // that no other node has continued yet (a chain stays on one queue); otherwise it starts a branch on
  // that device's next queue.
  std::vector<bool> continued;
  std::map<int, int> next_queue;
  for (size_t i = 0; i < gr.nodes.size(); ++i) {
    const Node& n = gr.nodes[i];
    Step st;
    st.node = i;
    st.device = node_dev[i];
    // A view reads only its source on the device; its other inputs (Reshape's shape...) were read when
    // planning, so they get no slot and no upload (24 uploads of a MiniLM plan, each a blocking write).
    // An in-place Slice / Split (MemoryPlan::in_place_slices) is a view of its input 0 too.
    const bool slice_view = m->plan_.in_place_slices.count(i) > 0;
    const int viewed = slice_view ? 0 : view_of[i];
    for (size_t k = 0; k < n.inputs.size(); ++k)
      st.in.push_back(viewed < 0 || int(k) == viewed ? slot_for(n.inputs[k], st.device) : -1);
    int queue = -1;
    for (int s : st.in) {
      if (s < 0) continue;
      int p = m->slots_[s].producer;
      if (m->slots_[s].kind == Kind::view) p = m->slots_[m->slots_[s].root].producer;
      if (p >= 0 && !continued[p] && m->steps_[p].device == st.device) {
        queue = m->steps_[p].queue;
        continued[p] = true;
        break;
      }
    }
    if (queue < 0) {
      int& nq = next_queue[st.device];
      queue = nq;
      nq = (nq + 1) % queues_for(opts, cx.device(st.device).info);
    }
    st.queue = queue;
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const std::string& v = n.outputs[o];
      if (v.empty()) {
        st.out.push_back(-1);
        continue;
      }
      const ValueInfo* info = gr.info(v);
      Slot s{Kind::planned, v, info->shape.to_shape(), info->dtype};
      s.producer = int(i);
      s.device = st.device;
      if ((o == 0 && view_of[i] >= 0) || slice_view) {
        s.kind = Kind::view;
        int src = st.in.at(size_t(viewed));
        const bool nested = m->slots_[src].kind == Kind::view;
        s.root = nested ? m->slots_[src].root : src;
        s.offset = (nested ? m->slots_[src].offset : 0) + (slice_view ? m->plan_.view_offset.at(v) : 0);
        s.producer = -1;
        s.device = m->slots_[s.root].device;
      } else {
        auto& ps = m->plan_.slots.at(v);
        s.offset = ps.offset;
        s.dedicated = ps.dedicated;
        for (auto w : ps.wait_nodes) st.waits.push_back(int(w));
      }
      st.out.push_back(add_slot(std::move(s)));
    }
    if (slice_view) {
      if (log::level() >= log::Level::debug)
        log::debug("{}: in place (views of its input)", n.describe());
    } else if (m->plan_.in_place_concats.count(i)) {
      auto cp = m->plan_.concat_copies.find(i);
      st.kernel = std::make_unique<InPlaceConcat>(
          cx, cp == m->plan_.concat_copies.end() ? std::vector<std::pair<size_t, size_t>>{} : cp->second);
      if (log::level() >= log::Level::debug)
        log::debug("{}: in place (its inputs are written into its output) on device {} queue {}", n.describe(),
                   st.device, st.queue);
    } else if (view_of[i] < 0 && all_outputs_empty(gr, n)) {
      st.kernel = std::make_unique<NothingToCompute>();
      if (log::level() >= log::Level::debug) log::debug("{}: nothing to compute (its outputs are empty)", n.describe());
    } else if (view_of[i] < 0) {
      LowerCtx lc{cx, st.device, n, {}, {}, {}, &opts};
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        lc.in.push_back(n.inputs[k].empty() ? ValueInfo{} : *gr.info(n.inputs[k]));
        auto ci = gr.initializers.find(n.inputs[k]);
        lc.value.push_back(ci == gr.initializers.end() ? nullptr : &ci->second);
      }
      for (auto& v : n.outputs) lc.out.push_back(v.empty() ? ValueInfo{} : *gr.info(v));
      try {
        PhaseTimer t(&PlanPhases::lowering_ms);
        st.kernel = defs[i]->lower(lc);
      } catch (const Error& e) {  // name the node, unless the lowering already did
        if (std::string_view(e.what()).starts_with(n.describe())) throw;
        fail("{}: {}", n.describe(), e.what());
      }
      if (log::level() >= log::Level::debug)  // describe() and algorithm() build strings
        log::debug("{}: {} on device {} queue {}", n.describe(), st.kernel->algorithm(), st.device, st.queue);
    }
    m->steps_.push_back(std::move(st));
    continued.push_back(false);
  }
  for (auto& o : gr.outputs) slot_for(o.name, opts.device);
  m->plan_signals();
  wait_uploads();
  return m;
}

void CompiledModel::plan_signals() {
  auto root_of = [&](int s) {
    auto& sl = slots_[size_t(s)];
    return sl.kind == Kind::view ? sl.root : s;
  };
  using Lane = std::pair<int, int>;
  auto lane_of = [&](size_t i) { return Lane{steps_[i].device, steps_[i].queue}; };
  signals_.assign(steps_.size(), 0);
  std::vector<int> producer(slots_.size(), -1);
  std::map<Lane, size_t> last;
  for (size_t i = 0; i < steps_.size(); ++i) {
    auto& st = steps_[i];
    if (!st.kernel) continue;
    const Lane lane = lane_of(i);
    for (int s : st.in)
      if (s >= 0)
        if (int p = producer[size_t(root_of(s))]; p >= 0 && lane_of(size_t(p)) != lane) signals_[size_t(p)] = 1;
    for (int w : st.waits)
      if (lane_of(size_t(w)) != lane) signals_[size_t(w)] = 1;
    for (int s : st.out)
      if (s >= 0) producer[size_t(root_of(s))] = int(i);
    last[lane] = i;
  }
  for (auto& [lane, i] : last) signals_[i] = 1;
  for (auto& o : graph_.outputs)
    if (auto it = slot_of_.find(o.name); it != slot_of_.end())
      if (int p = producer[size_t(root_of(it->second))]; p >= 0) signals_[size_t(p)] = 1;
}

std::vector<std::string> CompiledModel::describe() const {
  std::vector<std::string> r;
  for (auto& s : steps_) {
    const Node& n = graph_.nodes[s.node];
    r.push_back(fmt::format("{:<32} {:<12} device {} queue {}  {}", n.name, n.op_type, s.device, s.queue,
                            s.kernel                             ? s.kernel->algorithm()
                            : plan_.in_place_slices.count(s.node) ? "in place (views of its input)"
                                                                   : "view (no kernel)"));
  }
  return r;
}

std::unique_ptr<Session> CompiledModel::session() { return std::make_unique<Session>(shared_from_this()); }

Session::Session(std::shared_ptr<CompiledModel> m) : model_(std::move(m)) {
  static std::atomic<uint64_t> next_serial{1};
  serial_ = next_serial++;
  auto& cm = *model_;
  Context& cx = *cm.ctx_;
  // One arena per device that runs a node (the plan sized it; a device without planned bytes gets a
  // token buffer so every planned slot has one to point into).
  std::vector<bool> used(cx.device_count(), false);
  for (auto& st : cm.steps_) used[size_t(st.device)] = true;
  arenas_.resize(cx.device_count());
  for (size_t d = 0; d < used.size(); ++d) {
    if (!used[d]) continue;
    size_t bytes = d < cm.plan_.device_arena_bytes.size() ? cm.plan_.device_arena_bytes[d] : 0;
    arenas_[d] = cx.alloc(Shape{int64_t(std::max<size_t>(bytes, 256))}, DType::u8, int(d));
  }
  tensors_.resize(cm.slots_.size());
  for (size_t i = 0; i < cm.slots_.size(); ++i) {
    auto& s = cm.slots_[i];
    switch (s.kind) {
      case CompiledModel::Kind::input: tensors_[i] = cx.alloc(s.shape, s.dtype, s.device); break;
      case CompiledModel::Kind::constant: tensors_[i] = cm.constants_.at(int(i)); break;
      case CompiledModel::Kind::planned:
        if (s.dedicated) dedicated_[int(i)] = cx.alloc(s.shape, s.dtype, s.device);
        tensors_[i] = planned_tensor(int(i));
        break;
      case CompiledModel::Kind::view: {
        Tensor t = tensors_[size_t(s.root)];
        t.offset_bytes += s.offset;
        t.shape = s.shape;
        t.dtype = s.dtype;
        tensors_[i] = t;
        break;
      }
    }
  }
}

Tensor Session::planned_tensor(int slot) const {
  auto& s = model_->slots_[size_t(slot)];
  if (s.dedicated) return dedicated_.at(slot);
  Tensor t = arenas_.at(size_t(s.device));
  t.offset_bytes += s.offset;
  t.shape = s.shape;
  t.dtype = s.dtype;
  return t;
}

cl::CommandQueue Session::queue(int d, int q) const { return model_->ctx_->queue(d, q, model_->opts_.profiling); }

std::map<std::string, HostTensor> Session::run(const std::map<std::string, HostTensor>& inputs, Profiler* profiler) {
  return run(inputs, {}, nullptr, profiler);
}

std::map<std::string, HostTensor> Session::run(const std::map<std::string, HostTensor>& inputs,
                                               const std::map<std::string, Tensor>& device_inputs,
                                               const std::set<std::string>* read, Profiler* profiler) {
  auto& cm = *model_;
  Context& cx = *cm.ctx_;
  const Graph& g = cm.graph_;
  bool prof = profiler != nullptr;
  if (prof && !cm.opts_.profiling) fail("Session::run: profiling needs a model compiled with profiling on");
  for (auto& [name, t] : inputs)
    if (!g.is_input(name)) fail("input '{}' is not an input of graph '{}'", name, g.name);
  if (last_run_() != nullptr) check(last_run_.wait(), "clWaitForEvents", "the session's previous run");

  // slot -> event that makes its bytes ready (input uploads, producing steps).
  std::vector<cl::Event> slot_ready(cm.slots_.size());
  for (auto& [name, t] : device_inputs)
    if (!g.is_input(name)) fail("input '{}' is not an input of graph '{}'", name, g.name);
  for (auto& in : g.inputs) {
    auto it = inputs.find(in.name);
    Shape want = in.shape.to_shape();
    const int slot = cm.slot_of_.at(in.name);
    if (auto d = device_inputs.find(in.name); d != device_inputs.end()) {
      if (d->second.dtype != in.dtype || d->second.shape != want)
        fail("input '{}': expected {} {}, got a device tensor {} {}", in.name, to_string(in.dtype), want.str(),
             to_string(d->second.dtype), d->second.shape.str());
      lent_.try_emplace(slot, tensors_[size_t(slot)]);
      set_slot_tensor(slot, d->second);
      continue;
    }
    if (auto l = lent_.find(slot); l != lent_.end()) {  // back to its own buffer
      set_slot_tensor(slot, l->second);
      lent_.erase(l);
    }
    if (it == inputs.end()) fail("input '{}' ({} {}) is missing", in.name, to_string(in.dtype), want.str());
    const HostTensor& h = it->second;
    if (h.dtype() != in.dtype || h.shape() != want)
      fail("input '{}': expected {} {}, got {} {}", in.name, to_string(in.dtype), want.str(), to_string(h.dtype()),
           h.shape().str());
    int s = cm.slot_of_.at(in.name);
    ExecutionContext ec(queue(cm.slots_[size_t(s)].device, 0));
    ec.signal = &slot_ready[size_t(s)];
    ec.profiler = profiler;
    ec.label = "input " + in.name;
    if (h.bytes()) cx.write_async(tensors_[size_t(s)], h.data(), h.bytes(), ec);
  }
  auto ready_event = [&](int s, std::vector<cl::Event>& waits) {
    if (s < 0) return;
    auto& sl = cm.slots_[size_t(s)];
    int r = sl.kind == CompiledModel::Kind::view ? sl.root : s;
    if (slot_ready[size_t(r)]() != nullptr) waits.push_back(slot_ready[size_t(r)]);
  };
  std::vector<cl::Event> last_on_queue = enqueue_steps(slot_ready, profiler, cl::Event());
  std::map<std::string, HostTensor> result;
  std::vector<cl::Event> reads;
  for (auto& o : g.outputs) {
    if (read && !read->count(o.name)) continue;
    int s = cm.slot_of_.at(o.name);
    auto& sl = cm.slots_[size_t(s)];
    if (sl.kind == CompiledModel::Kind::constant) {
      result[o.name] = g.initializers.at(o.name);
      continue;
    }
    HostTensor h(sl.dtype, sl.shape);
    ExecutionContext ec(queue(sl.device, 0));
    ready_event(s, ec.wait_for);
    cl::Event ev;
    ec.signal = &ev;
    ec.profiler = profiler;
    ec.label = "output " + o.name;
    if (h.bytes()) {
      cx.read_async(tensors_[size_t(s)], h.data(), h.bytes(), ec);
      reads.push_back(ev);
    }
    result[o.name] = std::move(h);
  }
  for (auto& e : last_on_queue)
    if (e() != nullptr) reads.push_back(e);
  if (!reads.empty()) check(cl::Event::waitForEvents(reads), "clWaitForEvents", "model outputs");
  return result;
}

std::vector<cl::Event> Session::enqueue_steps(std::vector<cl::Event>& slot_ready, Profiler* profiler,
                                              const cl::Event& start) {
  auto& cm = *model_;
  const Graph& g = cm.graph_;
  auto root_of = [&](int s) {
    auto& sl = cm.slots_[size_t(s)];
    return sl.kind == CompiledModel::Kind::view ? sl.root : s;
  };
  std::vector<cl::Event> step_done(cm.steps_.size());
  std::map<std::pair<int, int>, cl::Event> last_on_queue;  // (device, queue) -> its last event
  std::map<std::pair<int, int>, cl::Event> migrated;       // (root slot, device) -> moved there
  // The queue (device, queue) whose command signals each slot's ready event: inputs are written on queue 0
  // of their device. Queues are in order, so a command never waits for an event of its own queue: a wait
  // list costs PoCL a dependency record per event (about 1.5 us a command on a 100-kernel model).
  using Lane = std::pair<int, int>;
  std::vector<Lane> slot_lane(cm.slots_.size());
  for (size_t s = 0; s < cm.slots_.size(); ++s) slot_lane[s] = {cm.slots_[s].device, 0};
  std::vector<Lane> step_lane(cm.steps_.size());
  std::map<std::pair<int, int>, Lane> migrated_lane;
  std::set<Lane> started;  // queues that have a command of this run
  // Which steps signal an event (CompiledModel::plan_signals; every step with a profiler, which records
  // each command's times). Creating an event per command costs PoCL about as much as the wait lists did.
  std::vector<char> all_signal;
  if (profiler) all_signal.assign(cm.steps_.size(), 1);
  const std::vector<char>& wants_event = profiler ? all_signal : cm.signals_;
  if (profiler) {
    std::set<std::pair<int, int>> lanes;
    for (auto& st : cm.steps_) lanes.insert({st.device, st.queue});
    for (auto& [d, q] : lanes) profiler->label_queue(queue(d, q), fmt::format("device {} queue {}", d, q));
  }
  for (size_t i = 0; i < cm.steps_.size(); ++i) {
    auto& st = cm.steps_[i];
    if (!st.kernel) continue;  // a view: its output's readiness is its root's
    const Node& n = g.nodes[st.node];
    ExecutionContext ec(queue(st.device, st.queue));
    const Lane lane{st.device, st.queue};
    step_lane[i] = lane;
    for (int s : st.in) {
      if (s < 0) continue;
      int r = root_of(s);
      const auto& rs = cm.slots_[size_t(r)];
      cl::Event ready = slot_ready[size_t(r)];
      Lane ready_lane = slot_lane[size_t(r)];
      if (rs.device != st.device && rs.kind != CompiledModel::Kind::constant) {
        // Bytes produced (or written) on another device: moved here once, after they are ready.
        cl::Event& moved = migrated[{r, st.device}];
        if (moved() == nullptr) {
          ExecutionContext mc(ec.queue);
          cl::Event after = ready() != nullptr ? ready : start;
          if (after() != nullptr) mc.wait_for.push_back(after);
          mc.signal = &moved;
          mc.profiler = profiler;
          mc.label = rs.name;
          cl::Event ev;
          check(mc.queue.enqueueMigrateMemObjects({tensors_[size_t(r)].buffer}, 0, mc.waits(), &ev),
                "clEnqueueMigrateMemObjects", fmt::format("{} to device {} for {}", rs.name, st.device, n.describe()));
          mc.record(ev, fmt::format("migrate to device {}", st.device).c_str());
          migrated_lane[{r, st.device}] = lane;
        }
        ready = moved;
        ready_lane = migrated_lane[{r, st.device}];
      }
      if (ready() != nullptr && ready_lane != lane) ec.wait_for.push_back(ready);
    }
    for (int w : st.waits)
      if (step_done[size_t(w)]() != nullptr && step_lane[size_t(w)] != lane)
        ec.wait_for.push_back(step_done[size_t(w)]);
    // The first command of each queue waits for the start; the queue orders the rest after it.
    if (start() != nullptr && started.insert(lane).second) ec.wait_for.push_back(start);
    ec.signal = wants_event[i] ? &step_done[i] : nullptr;
    ec.profiler = profiler;
    ec.label = n.name;
    // Every buffer of the context is usable on every device; the tensors handed to the kernel say they
    // are on its device (ops that check where their operands live see the truth after the migration).
    std::vector<Tensor> ins, outs;
    for (int s : st.in) {
      ins.push_back(s < 0 ? Tensor{} : tensors_[size_t(s)]);
      if (s >= 0) ins.back().device = st.device;
    }
    for (int s : st.out) {
      outs.push_back(s < 0 ? Tensor{} : tensors_[size_t(s)]);
      if (s >= 0) outs.back().device = st.device;
    }
    try {
      st.kernel->enqueue(ins, outs, ec);
    } catch (const Error& e) {
      fail("{}: {}", n.describe(), e.what());
    }
    // Nothing enqueued (empty tensors, an in-place Concat): a barrier keeps the chain, and holds its queue
    // until the step's waits on other queues are met (later commands of this queue wait for none of them).
    if (step_done[i]() == nullptr && (wants_event[i] || !ec.wait_for.empty())) {
      cl::Event ev;
      check(ec.queue.enqueueBarrierWithWaitList(ec.waits(), wants_event[i] ? &ev : nullptr),
            "clEnqueueBarrierWithWaitList", n.name);
      ec.wait_for.clear();
      if (wants_event[i]) step_done[i] = ev;
    }
    for (int s : st.out)
      if (s >= 0) {
        slot_ready[size_t(s)] = step_done[i];
        slot_lane[size_t(s)] = lane;
      }
    if (wants_event[i]) last_on_queue[lane] = step_done[i];
  }
  // A command waiting on another queue's event needs that queue flushed (OpenCL 1.2, 5.13); the host
  // may block only on queue 0 of the model's device.
  check(queue(cm.opts_.device, 0).flush(), "clFlush", "model run");
  for (auto& [k, e] : last_on_queue) check(queue(k.first, k.second).flush(), "clFlush", "model run");
  std::vector<cl::Event> r;
  for (auto& [k, e] : last_on_queue) r.push_back(e);
  for (auto& [k, e] : migrated) r.push_back(e);
  return r;
}

}  // namespace cldl::graph
