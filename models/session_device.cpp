// Session's device-side use: the app's buffers bound as inputs and outputs, host writes into inputs,
// and runs that return an event instead of waiting (the C API and OpenCL interop sit on these).
#include "models/executor.hpp"

namespace cldl::graph {

int Session::io_slot(const std::string& name, bool input) const {
  const Graph& g = model_->graph_;
  const auto& list = input ? g.inputs : g.outputs;
  for (auto& v : list)
    if (v.name == name) return model_->slot_of_.at(name);
  std::string names;
  for (auto& v : list) names += (names.empty() ? "" : ", ") + v.name;
  fail("'{}' is not an {} of graph '{}' (it has: {})", name, input ? "input" : "output", g.name, names);
}

void Session::set_slot_tensor(int slot, const Tensor& t) {
  auto& slots = model_->slots_;
  tensors_[size_t(slot)] = t;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].kind != CompiledModel::Kind::view || slots[i].root != slot) continue;
    Tensor v = t;
    v.offset_bytes += slots[i].offset;
    v.shape = slots[i].shape;
    v.dtype = slots[i].dtype;
    tensors_[i] = v;
  }
  // The parts of an in-place Concat whose output this is (MemoryPlan::concat_parts) are written where it now
  // lives: a graph output bound to the caller's buffer gets its parts there, and they move back with it.
  // (Their planned offsets are the output's plus theirs in it, so unbinding restores them exactly.)
  for (auto& [part, where] : model_->plan_.concat_parts) {
    if (where.first != slots[size_t(slot)].name) continue;
    auto p = model_->slot_of_.find(part);
    if (p == model_->slot_of_.end() || slots[size_t(p->second)].kind != CompiledModel::Kind::planned) continue;
    Tensor v = t;
    v.offset_bytes += where.second;
    v.shape = slots[size_t(p->second)].shape;
    v.dtype = slots[size_t(p->second)].dtype;
    set_slot_tensor(p->second, v);
  }
}

namespace {

void check_binding(const char* what, const std::string& name, const CompiledModel::Slot& s, const Tensor& t) {
  if (t.dtype != s.dtype || t.shape != s.shape)
    fail("{} '{}': expected {} {}, got {} {}", what, name, to_string(s.dtype), s.shape.str(), to_string(t.dtype),
         t.shape.str());
  size_t size = 0;
  check(t.buffer.getInfo(CL_MEM_SIZE, &size), "clGetMemObjectInfo", name);
  if (t.offset_bytes + t.bytes() > size)
    fail("{} '{}': {} bytes at offset {} do not fit a buffer of {} bytes", what, name, t.bytes(), t.offset_bytes, size);
  if (t.offset_bytes % dtype_size(t.dtype) != 0)
    fail("{} '{}': offset {} is not a multiple of the element size {}", what, name, t.offset_bytes,
         dtype_size(t.dtype));
}

}  // namespace

void Session::bind_input(const std::string& name, const Tensor& t) {
  int s = io_slot(name, true);
  auto& sl = model_->slots_[size_t(s)];
  if (last_run_() != nullptr) check(last_run_.wait(), "clWaitForEvents", "the session's previous run");
  input_ready_.erase(s);
  if (!t.valid()) {
    set_slot_tensor(s, model_->ctx_->alloc(sl.shape, sl.dtype, sl.device));
    return;
  }
  check_binding("input", name, sl, t);
  set_slot_tensor(s, t);
}

void Session::bind_output(const std::string& name, const Tensor& t) {
  int s = io_slot(name, false);
  auto& sl = model_->slots_[size_t(s)];
  if (last_run_() != nullptr) check(last_run_.wait(), "clWaitForEvents", "the session's previous run");
  if (t.valid()) check_binding("output", name, sl, t);
  if (sl.kind != CompiledModel::Kind::planned) {  // an input, constant or view: copied after each run
    if (t.valid())
      output_copies_[s] = t;
    else
      output_copies_.erase(s);
    return;
  }
  if (!t.valid()) {  // back to the bytes the plan gave it
    set_slot_tensor(s, planned_tensor(s));
    return;
  }
  set_slot_tensor(s, t);
}

void Session::write_input(const std::string& name, const HostTensor& h) {
  int s = io_slot(name, true);
  auto& sl = model_->slots_[size_t(s)];
  if (h.dtype() != sl.dtype || h.shape() != sl.shape)
    fail("input '{}': expected {} {}, got {} {}", name, to_string(sl.dtype), sl.shape.str(), to_string(h.dtype()),
         h.shape().str());
  Context& cx = *model_->ctx_;
  ExecutionContext ec(queue(sl.device, 0));
  if (last_run_() != nullptr) ec.wait_for.push_back(last_run_);
  cl::Event ev;
  ec.signal = &ev;
  ec.label = "input " + name;
  if (h.bytes()) {
    cx.write_async(tensors_[size_t(s)], h.data(), h.bytes(), ec);
    check(ev.wait(), "clWaitForEvents", ec.label);  // the copy is done: the caller may reuse its memory
  }
}

cl::Event Session::enqueue(const std::vector<cl::Event>& waits, Profiler* profiler) {
  auto& cm = *model_;
  Context& cx = *cm.ctx_;
  if (profiler && !cm.opts_.profiling) fail("Session::enqueue: profiling needs a model compiled with profiling on");
  cl::CommandQueue q0 = queue(cm.opts_.device, 0);
  std::vector<cl::Event> start_waits = waits;
  if (last_run_() != nullptr) start_waits.push_back(last_run_);
  for (auto& [s, e] : input_ready_) start_waits.push_back(e);
  input_ready_.clear();
  // One marker stands for "the run may start" so every first command waits for the same event.
  cl::Event start;
  if (!start_waits.empty())
    check(q0.enqueueMarkerWithWaitList(&start_waits, &start), "clEnqueueMarkerWithWaitList", "run start");
  std::vector<cl::Event> slot_ready(cm.slots_.size());
  for (auto& in : cm.graph_.inputs) slot_ready[size_t(cm.slot_of_.at(in.name))] = start;
  std::vector<cl::Event> done = enqueue_steps(slot_ready, profiler, start);
  for (auto& [s, dst] : output_copies_) {
    auto& sl = cm.slots_[size_t(s)];
    ExecutionContext ec(queue(sl.device, 0));
    int r = sl.kind == CompiledModel::Kind::view ? sl.root : s;
    if (slot_ready[size_t(r)]() != nullptr) ec.wait_for.push_back(slot_ready[size_t(r)]);
    if (ec.wait_for.empty() && start() != nullptr) ec.wait_for.push_back(start);
    cl::Event ev;
    ec.signal = &ev;
    ec.profiler = profiler;
    ec.label = "output " + sl.name;
    cx.copy_async(tensors_[size_t(s)], dst, ec);
    check(ec.queue.flush(), "clFlush", ec.label);  // the end marker on q0 waits for it
    if (ev() != nullptr) done.push_back(ev);
  }
  std::vector<cl::Event> all;
  for (auto& e : done)
    if (e() != nullptr) all.push_back(e);
  if (all.empty() && start() != nullptr) all.push_back(start);
  cl::Event end;
  check(q0.enqueueMarkerWithWaitList(all.empty() ? nullptr : &all, &end), "clEnqueueMarkerWithWaitList", "run end");
  last_run_ = end;
  return end;
}

HostTensor Session::read_output(const std::string& name) {
  int s = io_slot(name, false);
  auto& cm = *model_;
  auto& sl = cm.slots_[size_t(s)];
  if (sl.kind == CompiledModel::Kind::constant) return cm.graph_.initializers.at(name);
  HostTensor h(sl.dtype, sl.shape);
  Context& cx = *cm.ctx_;
  ExecutionContext ec(queue(sl.device, 0));
  if (last_run_() != nullptr) ec.wait_for.push_back(last_run_);
  cl::Event ev;
  ec.signal = &ev;
  ec.label = "output " + name;
  if (h.bytes()) {
    cx.read_async(tensors_[size_t(s)], h.data(), h.bytes(), ec);
    check(ev.wait(), "clWaitForEvents", ec.label);
  }
  return h;
}

Tensor Session::device_tensor(const std::string& name) const {
  const Graph& g = model_->graph_;
  int s = g.is_input(name) ? io_slot(name, true) : io_slot(name, false);
  return tensors_[size_t(s)];
}

}  // namespace cldl::graph
