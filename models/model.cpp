// Model (load once), plans per signature of input shapes (an LRU cache), ModelSession.
#include "models/model.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "models/const_fold.hpp"
#include "models/onnx_import.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {

namespace {

const ValueInfo* find_input(const Graph& g, const std::string& name) {
  for (auto& in : g.inputs)
    if (in.name == name) return &in;
  return nullptr;
}

std::string input_names(const Graph& g) {
  std::string r;
  for (auto& in : g.inputs) r += (r.empty() ? "" : ", ") + in.name;
  return r;
}

// A deciding value in an error message: its first 8 values (floats as floats), then how many there are.
std::string brief_value(const HostTensor& v) {
  const bool fl =
      v.dtype() == DType::f32 || v.dtype() == DType::f64 || v.dtype() == DType::f16 || v.dtype() == DType::bf16;
  const size_t n = size_t(v.numel()), shown = std::min<size_t>(n, 8);
  std::string s;
  if (fl) {
    auto d = to_doubles(v);
    for (size_t i = 0; i < shown; ++i) s += fmt::format("{}{}", i ? " " : "", d[i]);
  } else {
    auto d = to_ints(v);
    for (size_t i = 0; i < shown; ++i) s += fmt::format("{}{}", i ? " " : "", d[i]);
  }
  if (n > shown) s += fmt::format(" ... ({} values)", n);
  return s;
}
}  // namespace

std::shared_ptr<Model> Model::create(std::shared_ptr<Context> ctx, Graph g, const ModelOptions& opts) {
  auto m = std::shared_ptr<Model>(new Model());
  m->ctx_ = std::move(ctx);
  m->opts_ = opts;
  m->opts_.plan_cache = std::max<size_t>(1, opts.plan_cache);
  m->stats_.capacity = m->opts_.plan_cache;
  PrepareOptions bind_only;
  bind_only.bind = opts.prepare.bind;
  bind_inputs(g, bind_only, false);
  m->structure_ = prepare_structure(g);
  m->shape_inputs_ = shape_deciding_inputs(g);
  // What reads constants only folds the same for every signature: once here, not in each plan.
  if (opts.prepare.fold_constants) m->structure_.folded_nodes += fold_constants_at_load(g);
  for (auto& v : opts.decide_by_value)
    if (std::find(m->shape_inputs_.begin(), m->shape_inputs_.end(), v) == m->shape_inputs_.end())
      m->shape_inputs_.push_back(v);
  m->graph_ = std::move(g);
  m->constants_ = std::make_shared<ConstantCache>();
  for (auto& [name, t] : m->graph_.initializers) m->constants_->allow(t);

  // A signature known at load: every dim fixed by the graph or by opts.prepare.dims, no shape-deciding
  // input left unbound.
  bool fixed = m->shape_inputs_.empty();
  std::map<std::string, Shape> shapes;
  for (auto& in : m->graph_.inputs) {
    if (!in.shape.known) fixed = false;
    Shape s(in.shape.dims);
    for (size_t i = 0; i < s.dims.size(); ++i) {
      if (s.dims[i] >= 0) continue;
      const std::string sym = i < in.shape.symbols.size() ? in.shape.symbols[i] : std::string();
      auto it = sym.empty() ? opts.prepare.dims.end() : opts.prepare.dims.find(sym);
      if (it == opts.prepare.dims.end()) fixed = false;
      else s.dims[i] = it->second;
    }
    shapes[in.name] = s;
  }
  if (fixed) m->preplanned_ = m->plan(m->signature(shapes, {}));
  return m;
}

std::string sequence_item_input(const std::string& name, size_t k) { return fmt::format("{}[{}]", name, k); }

Signature Model::signature(const std::map<std::string, Shape>& shapes,
                           const std::map<std::string, HostTensor>& values) const {
  return make_signature(shapes, values, {});
}

Signature Model::make_signature(const std::map<std::string, Shape>& shapes,
                                const std::map<std::string, HostTensor>& values,
                                const std::map<std::string, std::vector<Shape>>& sequences) const {
  const Graph& g = graph_;
  for (auto& [name, s] : shapes)
    if (!find_input(g, name))
      fail("input '{}' is not an input of graph '{}' (it has: {})", name, g.name, input_names(g));
  Signature sig;
  std::map<std::string, std::pair<int64_t, std::string>> symbol;  // symbol -> (value, the input that set it)
  for (auto& in : g.inputs) {
    if (auto sq = sequences.find(in.name); sq != sequences.end()) {
      sig.sequences[in.name] = sq->second;
      sig.shapes.push_back(Shape{});
      sig.key += in.name + ":seq(";
      for (auto& s : sq->second) sig.key += s.str();
      sig.key += ");";
      continue;
    }
    auto it = shapes.find(in.name);
    if (it == shapes.end() && in.optional) {
      sig.absent.insert(in.name);
      sig.shapes.push_back(Shape{});
      sig.key += in.name + ":none;";
      continue;
    }
    if (in.sequence)
      fail("input '{}' is a sequence of {} tensors: pass it as a ModelValue sequence (ModelSession::run_values)",
           in.name, to_string(in.dtype));
    if (it == shapes.end()) fail("input '{}' ({} {}) is missing", in.name, to_string(in.dtype), in.shape.str());
    const Shape& got = it->second;
    if (in.shape.known) {
      if (got.rank() != in.shape.dims.size())
        fail("input '{}': expected rank {} ({}), got shape {}", in.name, in.shape.dims.size(), in.shape.str(),
             got.str());
      for (size_t i = 0; i < got.rank(); ++i) {
        int64_t want = in.shape.dims[i];
        if (want >= 0 && want != got.dims[i])
          fail("input '{}' dimension {}: expected {} (shape {}), got {} (shape {})", in.name, i, want,
               in.shape.str(), got.dims[i], got.str());
        const std::string sym = i < in.shape.symbols.size() ? in.shape.symbols[i] : std::string();
        if (want >= 0 || sym.empty()) continue;
        auto [s, fresh] = symbol.try_emplace(sym, got.dims[i], in.name);
        if (!fresh && s->second.first != got.dims[i])
          fail("input '{}' dimension {} ('{}') is {}, but input '{}' has '{}' = {}", in.name, i, sym, got.dims[i],
               s->second.second, sym, s->second.first);
      }
    }
    sig.shapes.push_back(got);
    sig.key += in.name + ":" + got.str() + ";";
  }
  for (auto& name : shape_inputs_) {
    if (sig.absent.count(name) || sig.sequences.count(name)) continue;
    auto it = values.find(name);
    if (it == values.end()) fail("input '{}' decides shapes: its value is needed to plan the run", name);
    sig.values[name] = it->second;
    const auto* b = static_cast<const unsigned char*>(it->second.data());
    sig.key += name + "=";
    for (size_t i = 0; i < it->second.bytes(); ++i) sig.key += fmt::format("{:02x}", b[i]);
    sig.key += ";";
  }
  return sig;
}

Signature Model::signature(const std::map<std::string, HostTensor>& inputs) const {
  std::map<std::string, Shape> shapes;
  for (auto& [name, h] : inputs) {
    const ValueInfo* in = find_input(graph_, name);
    if (!in) fail("input '{}' is not an input of graph '{}' (it has: {})", name, graph_.name, input_names(graph_));
    if (h.dtype() != in->dtype)
      fail("input '{}': expected {} {}, got {} {}", name, to_string(in->dtype), in->shape.str(), to_string(h.dtype()),
           h.shape().str());
    shapes[name] = h.shape();
  }
  std::map<std::string, HostTensor> values;
  for (auto& name : shape_inputs_)
    if (auto it = inputs.find(name); it != inputs.end()) values[name] = it->second;
  return signature(shapes, values);
}

Signature Model::signature(const std::map<std::string, ModelValue>& inputs) const {
  std::map<std::string, Shape> shapes;
  std::map<std::string, HostTensor> values;
  std::map<std::string, std::vector<Shape>> sequences;
  for (auto& [name, v] : inputs) {
    const ValueInfo* in = find_input(graph_, name);
    if (!in) fail("input '{}' is not an input of graph '{}' (it has: {})", name, graph_.name, input_names(graph_));
    if (v.kind == ModelValue::Kind::none) {
      if (!in->optional) fail("input '{}' is not optional: it needs a value", name);
      continue;
    }
    if ((v.kind == ModelValue::Kind::sequence) != in->sequence)
      fail("input '{}': expected a {}, got a {}", name, in->sequence ? "sequence" : "tensor",
           v.kind == ModelValue::Kind::sequence ? "sequence" : "tensor");
    if (v.kind == ModelValue::Kind::sequence) {
      auto& list = sequences[name];
      for (size_t k = 0; k < v.items.size(); ++k) {
        if (v.items[k].dtype() != in->dtype)
          fail("input '{}' element {}: expected {}, got {} {}", name, k, to_string(in->dtype),
               to_string(v.items[k].dtype()), v.items[k].shape().str());
        list.push_back(v.items[k].shape());
      }
      continue;
    }
    if (v.tensor.dtype() != in->dtype)
      fail("input '{}': expected {} {}, got {} {}", name, to_string(in->dtype), in->shape.str(),
           to_string(v.tensor.dtype()), v.tensor.shape().str());
    shapes[name] = v.tensor.shape();
    if (std::count(shape_inputs_.begin(), shape_inputs_.end(), name)) values[name] = v.tensor;
  }
  return make_signature(shapes, values, sequences);
}

std::shared_ptr<CompiledModel> Model::make_plan(const Signature& sig) {
  std::optional<PhaseTimer> copying(std::in_place, &PlanPhases::copy_ms);
  Graph g = graph_;  // initializers share their bytes with the model's (copy on write)
  {
    // Sequence inputs come in as their tensors and become sequences again through SequenceConstruct; an
    // absent optional is Optional() (control_flow.hpp expands both).
    std::vector<ValueInfo> inputs;
    std::vector<Node> front;
    auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
      Node n;
      n.name = g.unique_name(out + "/" + op);
      n.op_type = op;
      n.inputs = std::move(in);
      n.outputs = {out};
      front.push_back(std::move(n));
    };
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      const ValueInfo& in = g.inputs[i];
      if (sig.absent.count(in.name)) {
        node("Optional", {}, in.name);
      } else if (auto sq = sig.sequences.find(in.name); sq != sig.sequences.end()) {
        std::vector<std::string> items;
        for (size_t k = 0; k < sq->second.size(); ++k) {
          items.push_back(sequence_item_input(in.name, k));
          if (g.values.count(items.back()) || g.initializers.count(items.back()) || g.is_input(items.back()))
            fail("input '{}': the name '{}' for its element {} is taken in the graph", in.name, items.back(), k);
          inputs.push_back(ValueInfo{items.back(), in.dtype, ValueShape(sq->second[k])});
        }
        node(items.empty() ? "SequenceEmpty" : "SequenceConstruct", items, in.name);
      } else {
        inputs.push_back(in);
        inputs.back().shape = ValueShape(sig.shapes[i]);
        inputs.back().optional = false;
      }
    }
    g.inputs = std::move(inputs);
    g.nodes.insert(g.nodes.begin(), std::make_move_iterator(front.begin()), std::make_move_iterator(front.end()));
  }
  PrepareOptions po;
  po.bind = sig.values;
  try {
    bind_inputs(g, po, true);
    copying.reset();
    PlanBoundary boundary;
    PassStats ps = prepare_shapes(g, opts_.prepare.fold_constants, &boundary);
    if (boundary.hit) return make_staged(std::move(g), std::move(boundary));
    CompileOptions co = opts_.compile;
    co.constants = constants_;
    if (opts_.prepare.fold_constants) {
      PhaseTimer t(&PlanPhases::device_fold_ms);
      PlanPhaseScope untimed(nullptr);  // its own small compile is not the plan's lowering
      ps.folded_nodes += fold_constants_on_device(ctx_, g, co);
    }
    std::shared_ptr<CompiledModel> p;
    {
      PhaseTimer t(&PlanPhases::compile_ms);
      p = CompiledModel::compile(ctx_, std::move(g), co);
    }
    p->passes = ps;
    p->passes.folded_nodes += structure_.folded_nodes;
    p->passes.removed_dead += structure_.removed_dead;
    p->passes.fused += structure_.fused;
    return p;
  } catch (const Error& e) {
    std::string values;
    for (auto& [name, v] : sig.values) values += fmt::format(", {} = {}", name, brief_value(v));
    std::string shapes;
    for (size_t i = 0; i < graph_.inputs.size(); ++i) {
      const std::string& name = graph_.inputs[i].name;
      std::string what = sig.shapes[i].str();
      if (sig.absent.count(name)) what = "none";
      if (auto sq = sig.sequences.find(name); sq != sig.sequences.end()) {
        what = "sequence(";
        for (size_t k = 0; k < sq->second.size(); ++k) what += (k ? ", " : "") + sq->second[k].str();
        what += ")";
      }
      shapes += fmt::format("{}{}: {}", i ? ", " : "", name, what);
    }
    throw Error(fmt::format("graph '{}' with inputs {{{}{}}}: {}", graph_.name, shapes, values, e.what()), e.cl_code(),
                e.call());
  }
}

std::shared_ptr<CompiledModel> Model::make_staged(Graph g, PlanBoundary b) {
  std::set<std::string> produced, rest_reads;
  for (auto& n : g.nodes)
    for (auto& o : n.outputs)
      if (!o.empty()) produced.insert(o);
  for (auto& n : b.rest) {
    for (auto& in : n.inputs)
      if (!in.empty()) rest_reads.insert(in);
    for (auto& in : n.outer_inputs()) rest_reads.insert(in);
  }
  if (!b.value.empty()) rest_reads.insert(b.value);
  std::map<std::string, const CountedValue*> counted;
  for (auto& cv : b.counted) counted[cv.value] = &cv;
  Graph rest;
  rest.name = graph_.name;
  rest.opsets = g.opsets;
  rest.metadata = g.metadata;
  std::vector<ValueInfo> stage_out;
  std::set<std::string> out_names;
  auto add_out = [&](const std::string& v) {
    if (out_names.insert(v).second) stage_out.push_back(g.values.at(v));
  };
  for (auto& cv : b.counted) add_out(cv.count);
  for (auto& v : rest_reads) {
    if (produced.count(v)) {
      add_out(v);
      rest.inputs.push_back(g.values.at(v));
      if (auto c = counted.find(v); c != counted.end()) {  // its extent is the count: symbolic in the rest
        ValueShape& vs = rest.inputs.back().shape;
        vs.symbols.resize(vs.dims.size());
        vs.dims[c->second->axis] = -1;
        vs.symbols[c->second->axis] = c->second->count;
      }
    } else if (g.is_input(v)) {
      rest.inputs.push_back(*g.info(v));
    }
  }
  for (auto& o : graph_.outputs) {
    if (produced.count(o.name) || (g.is_constant(o.name) && !rest_reads.count(o.name))) add_out(o.name);
    else rest.outputs.push_back(o);
  }
  rest.nodes = std::move(b.rest);
  rest.initializers = g.initializers;  // shared bytes; the rest's dead-node removal drops what it does not read
  g.outputs = stage_out;
  prepare_shapes(g, opts_.prepare.fold_constants);  // the typed passes and dead-node removal for these outputs
  CompileOptions co = opts_.compile;
  co.constants = constants_;
  auto p = CompiledModel::compile(ctx_, std::move(g), co);
  ModelOptions ro;
  ro.compile = opts_.compile;
  ro.plan_cache = opts_.plan_cache;
  if (!b.value.empty()) ro.decide_by_value = {b.value};
  p->counted = std::move(b.counted);
  p->rest_reason = b.reason;
  if (!rest.nodes.empty()) p->rest = Model::create(ctx_, std::move(rest), ro);
  log::debug("model '{}': staged plan, the rest after: {}", graph_.name, b.reason);
  return p;
}

std::shared_ptr<CompiledModel> Model::plan(const Signature& sig) {
  auto lookup = [&]() -> std::shared_ptr<CompiledModel> {
    for (auto it = lru_.begin(); it != lru_.end(); ++it)
      if (it->first == sig.key) {
        lru_.splice(lru_.begin(), lru_, it);
        ++stats_.hits;
        return it->second;
      }
    return nullptr;
  };
  {
    std::lock_guard lock(mu_);
    if (auto p = lookup()) return p;
  }
  std::lock_guard planning(planning_);
  {
    std::lock_guard lock(mu_);
    if (auto p = lookup()) return p;
  }
  auto t0 = std::chrono::steady_clock::now();
  PlanPhases phases;
  std::shared_ptr<CompiledModel> p;
  {
    PlanPhaseScope timing(&phases);
    p = make_plan(sig);
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  phases.total_ms = ms;
  log::debug("model '{}': planned {}: {}", graph_.name, sig.key, phases.str());
  std::lock_guard lock(mu_);
  lru_.emplace_front(sig.key, p);
  ++stats_.misses;
  stats_.last_plan_ms = ms;
  stats_.last_plan_phases = phases;
  evict_to(opts_.plan_cache);
  return p;
}

void Model::evict_to(size_t capacity) {
  while (lru_.size() > capacity) {
    if (lru_.back().second == preplanned_) preplanned_.reset();
    lru_.pop_back();
    ++stats_.evictions;
  }
  stats_.plans = lru_.size();
}

bool Model::holds(const CompiledModel* p) const {
  std::lock_guard lock(mu_);
  for (auto& [k, q] : lru_)
    if (q.get() == p) return true;
  return false;
}

void Model::set_plan_cache(size_t capacity) {
  std::lock_guard lock(mu_);
  opts_.plan_cache = std::max<size_t>(1, capacity);
  stats_.capacity = opts_.plan_cache;
  evict_to(opts_.plan_cache);
}

PlanCacheStats Model::plan_cache_stats() const {
  std::lock_guard lock(mu_);
  PlanCacheStats s = stats_;
  s.plans = lru_.size();
  return s;
}

std::unique_ptr<ModelSession> Model::session() { return std::make_unique<ModelSession>(shared_from_this()); }

ModelSession::ModelSession(std::shared_ptr<Model> m) : model_(std::move(m)) {}

void ModelSession::prune() {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (model_->holds(&(*it)->model())) {
      ++it;
      continue;
    }
    if (it->get() == last_) last_ = nullptr;
    rest_.erase(it->get());
    it = sessions_.erase(it);  // its Session waits for nothing: runs wait for their outputs before returning
  }
}

std::vector<const Session*> ModelSession::sessions() const {
  std::vector<const Session*> r;
  for (auto& s : sessions_) r.push_back(s.get());
  return r;
}

Session& ModelSession::session_for(const Signature& sig) {
  auto plan = model_->plan(sig);
  auto it = std::find_if(sessions_.begin(), sessions_.end(), [&](auto& s) { return &s->model() == plan.get(); });
  if (it != sessions_.end()) {
    sessions_.splice(sessions_.begin(), sessions_, it);
  } else {
    sessions_.push_front(plan->session());
  }
  last_ = sessions_.front().get();
  prune();
  return *last_;
}

std::map<std::string, HostTensor> ModelSession::run(const std::map<std::string, HostTensor>& inputs,
                                                    Profiler* profiler) {
  return run(inputs, {}, profiler);
}

std::map<std::string, ModelValue> ModelSession::run_values(const std::map<std::string, ModelValue>& inputs,
                                                           Profiler* profiler) {
  bool composite_in = false, composite_out = false;
  for (auto& [name, v] : inputs) composite_in = composite_in || v.kind != ModelValue::Kind::tensor;
  for (auto& o : model_->graph().outputs) composite_out = composite_out || o.composite();
  if (!composite_in && !composite_out) {  // tensors only: run() as it is
    std::map<std::string, HostTensor> tensors;
    for (auto& [name, v] : inputs) tensors[name] = v.tensor;
    std::map<std::string, ModelValue> result;
    for (auto& [name, t] : run(tensors, profiler)) result[name] = ModelValue::of(std::move(t));
    return result;
  }
  Signature sig = model_->signature(inputs);
  std::map<std::string, HostTensor> feed;  // by the plan's input names: a sequence's tensors are name[k]
  for (auto& [name, v] : inputs) {
    if (v.kind == ModelValue::Kind::sequence)
      for (size_t k = 0; k < v.items.size(); ++k) feed[sequence_item_input(name, k)] = v.items[k];
    else if (v.kind == ModelValue::Kind::tensor)
      feed[name] = v.tensor;
  }
  return run_plan(session_for(sig), sig, feed, {}, profiler, nullptr);
}

std::map<std::string, HostTensor> ModelSession::run(const std::map<std::string, HostTensor>& inputs,
                                                    const std::map<std::string, Tensor>& device_inputs,
                                                    Profiler* profiler) {
  for (auto& o : model_->graph().outputs)
    if (o.composite())
      fail("graph '{}': output '{}' is a {}; run the model with ModelSession::run_values", model_->graph().name,
           o.name, o.sequence ? "sequence of tensors" : "optional");
  std::map<std::string, HostTensor> result;
  for (auto& [name, v] : run_tensors(inputs, device_inputs, profiler, nullptr)) result[name] = std::move(v.tensor);
  return result;
}

void ModelSession::run_on_device(const std::map<std::string, HostTensor>& inputs,
                                 const std::map<std::string, Tensor>& device_inputs,
                                 std::map<std::string, Tensor>& outputs) {
  for (auto& o : model_->graph().outputs)
    if (o.composite())
      fail("graph '{}': output '{}' is a {}; run the model with ModelSession::run_values", model_->graph().name,
           o.name, o.sequence ? "sequence of tensors" : "optional");
  outputs.clear();
  run_tensors(inputs, device_inputs, nullptr, &outputs);
}

std::map<std::string, ModelValue> ModelSession::run_tensors(const std::map<std::string, HostTensor>& inputs,
                                                            const std::map<std::string, Tensor>& device_inputs,
                                                            Profiler* profiler,
                                                            std::map<std::string, Tensor>* on_device) {
  Signature sig;
  if (device_inputs.empty()) {
    sig = model_->signature(inputs);
  } else {
    std::map<std::string, Shape> shapes;
    for (auto& [name, t] : device_inputs) shapes[name] = t.shape;
    std::map<std::string, HostTensor> values;
    for (auto& [name, h] : inputs) {
      shapes[name] = h.shape();
      if (std::count(model_->shape_inputs().begin(), model_->shape_inputs().end(), name)) values[name] = h;
    }
    sig = model_->signature(shapes, values);
  }
  return run_plan(session_for(sig), sig, inputs, device_inputs, profiler, on_device);
}

std::map<std::string, ModelValue> ModelSession::run_plan(Session& s, const Signature& sig,
                                                         const std::map<std::string, HostTensor>& inputs,
                                                         const std::map<std::string, Tensor>& device_inputs,
                                                         Profiler* profiler, std::map<std::string, Tensor>* on_device) {
  const CompiledModel& plan = s.model();
  std::map<std::string, HostTensor> feed;  // the plan has the shape-deciding inputs as constants
  for (auto& [name, h] : inputs)
    if (!sig.values.count(name)) feed[name] = h;
  // A sequence or optional output goes out as its tensors (the plan's outputs) and comes back as one value.
  auto unpacked = [&](const std::string& name, const std::map<std::string, HostTensor>& out) {
    const auto& unpacked = plan.graph().unpacked_outputs;
    auto u = unpacked.find(name);
    if (u == unpacked.end()) return ModelValue::of(out.at(name));
    if (u->second.kind == ModelValue::Kind::none) return ModelValue::none();
    if (u->second.kind == ModelValue::Kind::tensor) return ModelValue::of(out.at(u->second.items.at(0)));
    std::vector<HostTensor> items;
    for (auto& v : u->second.items) items.push_back(out.at(v));
    return ModelValue::sequence_of(std::move(items));
  };
  std::map<std::string, ModelValue> result;
  if (!plan.staged() && on_device) {  // the outputs stay in the Session's buffers
    const std::set<std::string> none;
    s.run(feed, device_inputs, &none, profiler);
    for (auto& o : model_->graph().outputs) (*on_device)[o.name] = s.device_tensor(o.name);
    return result;
  }
  if (!plan.staged()) {
    auto out = s.run(feed, device_inputs, nullptr, profiler);
    for (auto& o : model_->graph().outputs) result[o.name] = unpacked(o.name, out);
    return result;
  }

  // A staged plan. What crosses to the rest stays on the device, except what the rest needs on the host:
  // the counts of counted outputs, and values that decide its shapes (an If's condition...); the model's
  // outputs this part makes come back as well. Sequences and optionals cross as their tensors (the rest
  // builds them again: infer_shapes), so the model's composite outputs all come from the rest.
  std::set<std::string> read;
  for (auto& cv : plan.counted) read.insert(cv.count);
  std::set<std::string> counted_outputs;
  for (auto& cv : plan.counted) counted_outputs.insert(cv.value);
  if (plan.rest)
    for (auto& v : plan.rest->shape_inputs())
      if (!counted_outputs.count(v)) read.insert(v);
  if (!on_device)
    for (auto& o : model_->graph().outputs)
      if (!counted_outputs.count(o.name)) read.insert(o.name);
  auto out = s.run(feed, device_inputs, &read, profiler);

  // Counted outputs: their real shape from the count, a view of the first elements of the bound buffer.
  std::map<std::string, Tensor> views;
  for (auto& cv : plan.counted) {
    const int64_t n = to_ints(out.at(cv.count))[0];
    if (n < 0 || n > cv.bound[cv.axis])
      fail("graph '{}': '{}' counts {} rows, outside [0, {}] (its bound {})", model_->graph().name, cv.value, n,
           cv.bound[cv.axis], cv.bound.str());
    Tensor t = s.device_tensor(cv.value);
    t.shape = cv.real(n);
    views[cv.value] = t;
  }
  std::map<std::string, ModelValue> tail;
  if (plan.rest) {
    auto& rs = rest_[&s];
    if (!rs) rs = plan.rest->session();
    std::map<std::string, HostTensor> rest_host;
    std::map<std::string, Tensor> rest_dev;
    const Graph& pg = plan.graph();
    for (auto& in : plan.rest->graph().inputs) {
      const bool deciding = std::count(plan.rest->shape_inputs().begin(), plan.rest->shape_inputs().end(), in.name);
      if (auto v = views.find(in.name); v != views.end()) {
        if (!deciding) rest_dev[in.name] = v->second;
        else rest_host[in.name] = v->second.numel() ? model_->context().download(v->second)
                                                    : HostTensor(v->second.dtype, v->second.shape);
      } else if (auto it = out.find(in.name); it != out.end()) {
        rest_host[in.name] = it->second;
      } else if (std::any_of(pg.outputs.begin(), pg.outputs.end(), [&](auto& o) { return o.name == in.name; })) {
        rest_dev[in.name] = s.device_tensor(in.name);
      } else if (auto h = inputs.find(in.name); h != inputs.end()) {
        rest_host[in.name] = h->second;
      } else if (deciding) {  // an app's device input the rest decides on: read back
        const Tensor& t = device_inputs.at(in.name);
        rest_host[in.name] = t.numel() ? model_->context().download(t) : HostTensor(t.dtype, t.shape);
      } else {
        rest_dev[in.name] = device_inputs.at(in.name);
      }
    }
    tail = rs->run_tensors(rest_host, rest_dev, profiler, on_device);
  }
  if (on_device) {  // the rest's outputs are in place already; this part's are its buffers (or views)
    for (auto& o : model_->graph().outputs) {
      if (on_device->count(o.name)) continue;
      auto v = views.find(o.name);
      (*on_device)[o.name] = v != views.end() ? v->second : s.device_tensor(o.name);
    }
    return result;
  }
  for (auto& o : model_->graph().outputs) {
    if (auto it = tail.find(o.name); it != tail.end()) {
      result[o.name] = std::move(it->second);
    } else if (auto v = views.find(o.name); v != views.end()) {  // the first elements of the bound buffer
      result[o.name] = ModelValue::of(v->second.numel() ? model_->context().download(v->second)
                                                        : HostTensor(v->second.dtype, v->second.shape));
    } else {
      result[o.name] = ModelValue::of(out.at(o.name));
    }
  }
  return result;
}

std::shared_ptr<Model> load_model(std::shared_ptr<Context> ctx, const std::string& path, const ModelOptions& opts) {
  return Model::create(std::move(ctx), import_onnx_file(path), opts);
}

std::shared_ptr<CompiledModel> load_onnx_model(std::shared_ptr<Context> ctx, const std::string& path,
                                               const LoadOptions& opts) {
  auto m = load_model(std::move(ctx), path, opts);
  if (!m->preplanned()) {
    Graph g = m->graph();
    bind_inputs(g, opts.prepare, true);  // names the first dim nothing fixed
    fail("graph '{}': inputs {} decide shapes by their values: bind them", m->graph().name,
         fmt::join(m->shape_inputs(), ", "));
  }
  return m->preplanned();
}

}  // namespace cldl::graph
