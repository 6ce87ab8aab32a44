// CompiledModel (lowering, queue assignment, memory plan) and Session::run (event-scheduled enqueue).
#include "models/executor.hpp"

#include <set>

#include "runtime/log.hpp"

namespace cldl::graph {

std::shared_ptr<CompiledModel> CompiledModel::compile(std::shared_ptr<Context> ctx, Graph g, const CompileOptions& opts) {
  auto m = std::shared_ptr<CompiledModel>(new CompiledModel());
  m->ctx_ = std::move(ctx);
  m->graph_ = std::move(g);
  m->opts_ = opts;
  Graph& gr = m->graph_;
  Context& cx = *m->ctx_;
  if (opts.device < 0 || size_t(opts.device) >= cx.device_count())
    fail("compile: device {} does not exist (context has {})", opts.device, cx.device_count());

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
  m->plan_ = plan_memory(gr, view_of);

  auto add_slot = [&](Slot s) {
    m->slot_of_[s.name] = int(m->slots_.size());
    m->slots_.push_back(std::move(s));
    return int(m->slots_.size() - 1);
  };
  for (auto& in : gr.inputs) add_slot({Kind::input, in.name, in.shape.to_shape(), in.dtype});
  auto slot_for = [&](const std::string& v) -> int {
    if (v.empty()) return -1;
    auto it = m->slot_of_.find(v);
    if (it != m->slot_of_.end()) return it->second;
    auto ci = gr.initializers.find(v);
    if (ci == gr.initializers.end()) fail("compile: value '{}' is not defined", v);
    int s = add_slot({Kind::constant, v, ci->second.shape(), ci->second.dtype()});
    m->constants_[s] = cx.upload(ci->second, opts.device);
    return s;
  };

  // Queue assignment: a node continues the queue of its first producer that no other node has continued
  // yet (a chain stays on one queue); otherwise it starts a branch on the next queue.
  std::vector<bool> continued;
  int next_queue = 0;
  for (size_t i = 0; i < gr.nodes.size(); ++i) {
    const Node& n = gr.nodes[i];
    Step st;
    st.node = i;
    for (auto& v : n.inputs) st.in.push_back(slot_for(v));
    int queue = -1;
    for (int s : st.in) {
      if (s < 0) continue;
      int p = m->slots_[s].producer;
      if (s >= 0 && m->slots_[s].kind == Kind::view) p = m->slots_[m->slots_[s].root].producer;
      if (p >= 0 && !continued[p]) {
        queue = m->steps_[p].queue;
        continued[p] = true;
        break;
      }
    }
    if (queue < 0) {
      queue = next_queue;
      next_queue = (next_queue + 1) % std::max(1, opts.queues);
    }
    st.queue = queue;
    m->queues_used_ = std::max(m->queues_used_, queue + 1);
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const std::string& v = n.outputs[o];
      if (v.empty()) {
        st.out.push_back(-1);
        continue;
      }
      const ValueInfo* info = gr.info(v);
      Slot s{Kind::planned, v, info->shape.to_shape(), info->dtype};
      s.producer = int(i);
      if (o == 0 && view_of[i] >= 0) {
        s.kind = Kind::view;
        int src = st.in.at(size_t(view_of[i]));
        s.root = m->slots_[src].kind == Kind::view ? m->slots_[src].root : src;
        s.producer = -1;
      } else {
        auto& ps = m->plan_.slots.at(v);
        s.offset = ps.offset;
        for (auto w : ps.wait_nodes) st.waits.push_back(int(w));
      }
      st.out.push_back(add_slot(std::move(s)));
    }
    if (view_of[i] < 0) {
      LowerCtx lc{cx, opts.device, n, {}, {}, {}, &opts};
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        lc.in.push_back(n.inputs[k].empty() ? ValueInfo{} : *gr.info(n.inputs[k]));
        auto ci = gr.initializers.find(n.inputs[k]);
        lc.value.push_back(ci == gr.initializers.end() ? nullptr : &ci->second);
      }
      for (auto& v : n.outputs) lc.out.push_back(v.empty() ? ValueInfo{} : *gr.info(v));
      try {
        st.kernel = defs[i]->lower(lc);
      } catch (const Error& e) {  // name the node, unless the lowering already did
        if (std::string_view(e.what()).starts_with(n.describe())) throw;
        fail("{}: {}", n.describe(), e.what());
      }
      log::debug("{}: {} on queue {}", n.describe(), st.kernel->algorithm(), st.queue);
    }
    m->steps_.push_back(std::move(st));
    continued.push_back(false);
  }
  for (auto& o : gr.outputs) slot_for(o.name);
  return m;
}

std::vector<std::string> CompiledModel::describe() const {
  std::vector<std::string> r;
  for (auto& s : steps_) {
    const Node& n = graph_.nodes[s.node];
    r.push_back(fmt::format("{:<32} {:<12} queue {}  {}", n.name, n.op_type, s.queue,
                            s.kernel ? s.kernel->algorithm() : "view (no kernel)"));
  }
  return r;
}

std::unique_ptr<Session> CompiledModel::session() { return std::make_unique<Session>(shared_from_this()); }

Session::Session(std::shared_ptr<CompiledModel> m) : model_(std::move(m)) {
  auto& cm = *model_;
  Context& cx = *cm.ctx_;
  int d = cm.opts_.device;
  arena_ = cx.alloc(Shape{int64_t(std::max<size_t>(cm.plan_.arena_bytes, 256))}, DType::u8, d);
  tensors_.resize(cm.slots_.size());
  for (size_t i = 0; i < cm.slots_.size(); ++i) {
    auto& s = cm.slots_[i];
    switch (s.kind) {
      case CompiledModel::Kind::input: tensors_[i] = cx.alloc(s.shape, s.dtype, d); break;
      case CompiledModel::Kind::constant: tensors_[i] = cm.constants_.at(int(i)); break;
      case CompiledModel::Kind::planned: {
        Tensor t = arena_;
        t.offset_bytes = arena_.offset_bytes + s.offset;
        t.shape = s.shape;
        t.dtype = s.dtype;
        tensors_[i] = t;
        break;
      }
      case CompiledModel::Kind::view: {
        Tensor t = tensors_[size_t(s.root)];
        t.shape = s.shape;
        t.dtype = s.dtype;
        tensors_[i] = t;
        break;
      }
    }
  }
}

std::map<std::string, HostTensor> Session::run(const std::map<std::string, HostTensor>& inputs, Profiler* profiler) {
  auto& cm = *model_;
  Context& cx = *cm.ctx_;
  const Graph& g = cm.graph_;
  int d = cm.opts_.device;
  bool prof = profiler != nullptr;
  if (prof && !cm.opts_.profiling) fail("Session::run: profiling needs a model compiled with profiling on");
  for (auto& [name, t] : inputs)
    if (!g.is_input(name)) fail("input '{}' is not an input of graph '{}'", name, g.name);
  auto queue = [&](int q) { return cx.queue(d, q, cm.opts_.profiling); };
  if (last_run_() != nullptr) check(last_run_.wait(), "clWaitForEvents", "the session's previous run");

  // slot -> event that makes its bytes ready (input uploads, producing steps).
  std::vector<cl::Event> slot_ready(cm.slots_.size());
  for (auto& in : g.inputs) {
    auto it = inputs.find(in.name);
    Shape want = in.shape.to_shape();
    if (it == inputs.end()) fail("input '{}' ({} {}) is missing", in.name, to_string(in.dtype), want.str());
    const HostTensor& h = it->second;
    if (h.dtype() != in.dtype || h.shape() != want)
      fail("input '{}': expected {} {}, got {} {}", in.name, to_string(in.dtype), want.str(), to_string(h.dtype()),
           h.shape().str());
    int s = cm.slot_of_.at(in.name);
    ExecutionContext ec(queue(0));
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
    int s = cm.slot_of_.at(o.name);
    auto& sl = cm.slots_[size_t(s)];
    if (sl.kind == CompiledModel::Kind::constant) {
      result[o.name] = g.initializers.at(o.name);
      continue;
    }
    HostTensor h(sl.dtype, sl.shape);
    ExecutionContext ec(queue(0));
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
  Context& cx = *cm.ctx_;
  const Graph& g = cm.graph_;
  int d = cm.opts_.device;
  auto queue = [&](int q) { return cx.queue(d, q, cm.opts_.profiling); };
  auto ready_event = [&](int s, std::vector<cl::Event>& waits) {
    if (s < 0) return;
    auto& sl = cm.slots_[size_t(s)];
    int r = sl.kind == CompiledModel::Kind::view ? sl.root : s;
    if (slot_ready[size_t(r)]() != nullptr) waits.push_back(slot_ready[size_t(r)]);
  };
  std::vector<cl::Event> step_done(cm.steps_.size());
  std::vector<cl::Event> last_on_queue(size_t(cm.queues_used_));
  for (size_t i = 0; i < cm.steps_.size(); ++i) {
    auto& st = cm.steps_[i];
    if (!st.kernel) continue;  // a view: its output's readiness is its root's
    const Node& n = g.nodes[st.node];
    ExecutionContext ec(queue(st.queue));
    for (int s : st.in) ready_event(s, ec.wait_for);
    for (int w : st.waits)
      if (step_done[size_t(w)]() != nullptr) ec.wait_for.push_back(step_done[size_t(w)]);
    if (ec.wait_for.empty() && start() != nullptr) ec.wait_for.push_back(start);
    ec.signal = &step_done[i];
    ec.profiler = profiler;
    ec.label = n.name;
    std::vector<Tensor> ins, outs;
    for (int s : st.in) ins.push_back(s < 0 ? Tensor{} : tensors_[size_t(s)]);
    for (int s : st.out) outs.push_back(s < 0 ? Tensor{} : tensors_[size_t(s)]);
    try {
      st.kernel->enqueue(ins, outs, ec);
    } catch (const Error& e) {
      fail("{}: {}", n.describe(), e.what());
    }
    if (step_done[i]() == nullptr) {  // nothing enqueued (empty tensors): a marker keeps the event chain
      cl::Event ev;
      check(ec.queue.enqueueMarkerWithWaitList(ec.waits(), &ev), "clEnqueueMarkerWithWaitList", n.name);
      step_done[i] = ev;
    }
    for (int s : st.out)
      if (s >= 0) slot_ready[size_t(s)] = step_done[i];
    last_on_queue[size_t(st.queue)] = step_done[i];
  }
  return last_on_queue;
}

}  // namespace cldl::graph
