// prepare(): binding, sort, shape inference + folding, dead-node removal, registered fusion passes.
#include "models/passes.hpp"

#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <set>

#include "models/autodiff.hpp"
#include "models/control_flow.hpp"
#include "models/op_registry.hpp"
#include "models/plan_phases.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {

namespace {
struct NamedPass {
  std::string name;
  FusionPass pass;
  FusionStage stage;
};
std::vector<NamedPass>& fusion_passes() {
  static std::vector<NamedPass> p;
  return p;
}

std::string domain_name(const std::string& d) { return d.empty() ? "ai.onnx" : d; }

// The opset `n` follows in `scope`'s model; errors when cldl has neither an implementation nor a host
// folder for it, or its implementation does not cover that opset.
int64_t checked_opset(const Graph& scope, const Node& n, const OpDef* def, const HostFold* folder) {
  int64_t opset = node_opset(scope, n);
  if (!def && !folder)
    fail("{}: unsupported op '{}' (domain {}, opset {}): no cldl implementation", n.describe(), n.op_type,
         domain_name(n.domain), opset);
  if (def) check_opset(*def, n, opset);
  return opset;
}
}  // namespace

void register_fusion_pass(std::string name, FusionPass p, FusionStage stage) {
  fusion_passes().push_back({std::move(name), std::move(p), stage});
}

int64_t placed_device(const Node& n) { return n.attr_i(kDeviceAttr, -1); }

void place_like(Node& to, const Node& from) {
  if (auto it = from.attrs.find(kDeviceAttr); it != from.attrs.end()) to.attrs[kDeviceAttr] = it->second;
}

ValueReaders value_readers(const Graph& g) {
  ValueReaders r;
  r.reserve(g.nodes.size() * 2 + g.outputs.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (auto& in : g.nodes[i].inputs)
      if (!in.empty()) r[in].push_back(int(i));
    for (auto& in : g.nodes[i].outer_inputs()) r[in].push_back(int(i));
  }
  for (auto& o : g.outputs) r[o.name].push_back(-1);
  return r;
}

size_t fold_residual_adds(Graph& g, const std::function<bool(Node&, const std::string&)>& fold) {
  if (!has_op(g, {"Add"})) return 0;
  auto rd = value_readers(g);
  auto pr = g.producers();
  auto f32_shape = [&](const std::string& v) -> std::optional<Shape> {
    auto it = g.values.find(v);
    if (it == g.values.end() || it->second.dtype != DType::f32 || !it->second.shape.is_static()) return std::nullopt;
    return it->second.shape.to_shape();
  };
  size_t n = 0;
  std::set<size_t> drop;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& add = g.nodes[i];
    if (add.op_type != "Add" || !add.domain.empty() || add.input_count() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const std::string y = add.input(size_t(side)), r = add.input(size_t(1 - side));
      auto p = pr.find(y);
      if (y == r || p == pr.end() || rd[y] != std::vector<int>{int(i)} || g.initializers.count(r)) continue;
      Node& prod = g.nodes[p->second];
      if (prod.outputs.empty() || prod.outputs[0] != y) continue;
      if (auto rp = pr.find(r); rp != pr.end() && rp->second >= p->second) continue;  // r comes after P
      const auto ys = f32_shape(y), rs = f32_shape(r), os = f32_shape(add.outputs[0]);
      if (!ys || !rs || !os || *ys != *rs || *os != *ys) continue;
      const std::string out = add.outputs[0];
      if (!fold(prod, r)) continue;
      prod.outputs[0] = out;
      drop.insert(i);
      ++n;
      break;
    }
  }
  erase_nodes(g, drop);
  return n;
}

void erase_nodes(Graph& g, const std::set<size_t>& drop) {
  if (drop.empty()) return;  // a pass that matched nothing: no copy of every node
  std::vector<Node> kept;
  kept.reserve(g.nodes.size() - std::min(drop.size(), g.nodes.size()));
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!drop.count(i)) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
}

bool has_op(const Graph& g, std::initializer_list<std::string_view> ops) {
  for (auto& n : g.nodes)
    if (n.domain.empty())
      for (std::string_view op : ops)
        if (n.op_type == op) return true;
  return false;
}

size_t infer_shapes(Graph& g, bool fold, PlanBoundary* boundary) {
  g.values.clear();
  for (auto& in : g.inputs) {
    if (!in.shape.known) fail("graph input '{}' has no shape", in.name);
    if (!in.shape.is_static()) fail("graph input '{}' has shape {}: bind its symbolic dimensions", in.name, in.shape.str());
    if (bounded_numel(in.shape.dims, int64_t(1) << 40) < 0)
      fail("graph input '{}' has shape {}: too many elements", in.name, in.shape.str());
    g.values[in.name] = in;
  }
  // Both maps are ordered by name: each initializer goes in next to the previous one (amortised O(1),
  // not a search from the root; a plan enters ~400 of them twice).
  for (auto hint = g.values.end(); auto& [name, t] : g.initializers) {
    hint = g.values.insert_or_assign(hint, name, ValueInfo{name, t.dtype(), t.shape()});
    ++hint;
  }
  size_t folded = 0;
  std::vector<Node> kept, work = std::move(g.nodes);
  ControlFlowExpander unrolls;
  size_t next = 0;
  // Counted ops met with a boundary (their counts end this stage) and the nodes that read what they make,
  // directly or not: deferred to the rest, in order, while inference goes on with the others (so
  // independent counted ops share one stage, and one read of their counts).
  std::vector<CountedValue> stage_counted;
  std::set<std::string> tainted;
  std::vector<Node> deferred;
  auto move_deferred = [&] {
    boundary->counted = std::move(stage_counted);
    for (auto& d : deferred) boundary->rest.push_back(std::move(d));
  };
  // Sequences and optionals live in the expander only: the rest builds those it reads (or returns) again
  // from their tensors, which cross the boundary as tensors.
  auto rebuild_composites = [&] {
    std::vector<std::string> read;
    for (auto& n : boundary->rest) {
      read.insert(read.end(), n.inputs.begin(), n.inputs.end());
      for (auto& v : n.outer_inputs()) read.push_back(v);
    }
    for (auto& o : g.outputs) read.push_back(o.name);
    std::vector<Node> front = unrolls.rebuild(g, read);
    boundary->rest.insert(boundary->rest.begin(), std::make_move_iterator(front.begin()),
                          std::make_move_iterator(front.end()));
  };
  // A decision needs `value` from run-time data: g keeps the nodes inferred so far, `boundary` gets the
  // deferred nodes, `first` and the nodes not reached yet (Loops still expanding continue there as Loops of
  // their own).
  auto stop_at = [&](const std::string& value, const std::string& reason, Node first) {
    boundary->hit = true;
    boundary->value = value;
    boundary->reason = reason;
    move_deferred();
    boundary->rest.push_back(std::move(first));
    for (size_t k = next; k < work.size(); ++k)
      boundary->rest.push_back(unrolls.handles(work[k]) && !work[k].domain.empty() ? unrolls.remaining_loop(g, work[k])
                                                                                  : std::move(work[k]));
    rebuild_composites();
    g.nodes = std::move(kept);
  };
  std::vector<CountedValue> counted;  // outputs of counted ops kept without a boundary (a stage's own)
  auto reads_tainted = [&](const Node& n) {
    for (auto& in : n.inputs)
      if (!in.empty() && tainted.count(in)) return true;
    for (auto& in : n.outer_inputs())
      if (tainted.count(in)) return true;
    return false;
  };
  while (next < work.size()) {
    Node n = std::move(work[next++]);
    if (!tainted.empty() && reads_tainted(n)) {
      for (auto& o : n.outputs)
        if (!o.empty()) tainted.insert(o);
      deferred.push_back(unrolls.handles(n) && !n.domain.empty() ? unrolls.remaining_loop(g, n) : std::move(n));
      continue;
    }
    if (unrolls.handles(n)) {
      // Control flow whose decisions are known when planning (control_flow.hpp): the nodes it stands
      // for replace it, and inference goes on through them.
      std::vector<Node> nodes;
      try {
        nodes = unrolls.expand(g, n);
      } catch (const RuntimeDecision& d) {
        if (!boundary) throw;
        stop_at(d.value, d.what(), n.domain.empty() ? n : unrolls.remaining_loop(g, n));
        return folded;
      }
      work.insert(work.begin() + std::ptrdiff_t(next), std::make_move_iterator(nodes.begin()),
                  std::make_move_iterator(nodes.end()));
      ++folded;
      continue;
    }
    const OpDef* def = find_op(n.op_type, n.domain);
    const HostFold* folder = find_folder(n.op_type, n.domain);
    int64_t opset = checked_opset(g, n, def, folder);
    n.opset = opset;
    InferCtx c{n, opset, {}, {}, {}, {}, {}};
    for (auto& i : n.inputs) {
      if (i.empty()) {
        c.in.push_back(nullptr);
        c.value.push_back(nullptr);
        continue;
      }
      auto it = g.values.find(i);
      if (it == g.values.end()) fail("{}: input '{}' is not defined", n.describe(), i);
      c.in.push_back(&it->second);
      auto ci = g.initializers.find(i);
      c.value.push_back(ci == g.initializers.end() ? nullptr : &ci->second);
    }
    c.out.resize(n.outputs.size());
    for (size_t i = 0; i < n.outputs.size(); ++i) c.out[i].name = n.outputs[i];
    c.folded.resize(n.outputs.size());
    bool constant_in = c.all_constant();
    if (folder && constant_in && fold) {
      auto r = (*folder)(c);
      for (size_t i = 0; i < r.size() && i < c.out.size(); ++i) c.fold(i, std::move(r[i]));
    } else if (def) {
      if (def->expand_runtime && std::any_of(def->const_inputs.begin(), def->const_inputs.end(), [&](size_t i) {
            return i < c.in.size() && c.in[i] && !c.value[i];
          })) {
        std::vector<Node> nodes = def->expand_runtime(g, n);
        work.insert(work.begin() + std::ptrdiff_t(next), std::make_move_iterator(nodes.begin()),
                    std::make_move_iterator(nodes.end()));
        continue;
      }
      if (boundary)  // an argument that must be known, computed from run-time data: stop before this node
        for (size_t i : def->const_inputs)
          if (i < c.in.size() && c.in[i] && !c.value[i] && c.in[i]->shape.is_static() &&
              c.in[i]->shape.to_shape().numel() <= kMaxDecidingElements) {
            std::string value = n.inputs[i];
            stop_at(value, fmt::format("{}: input '{}' is computed from run-time data", n.describe(), value), std::move(n));
            return folded;
          }
      def->infer(c);
      // A view (Identity, Reshape, Squeeze...) of constant inputs is the same bytes under its shape.
      if (fold && def->view_of >= 0 && constant_in && size_t(def->view_of) < c.value.size() && c.value[size_t(def->view_of)] &&
          !c.folded.empty() && !c.folded[0] && c.out[0].shape.is_static() &&
          c.out[0].dtype == c.value[size_t(def->view_of)]->dtype()) {
        HostTensor t = *c.value[size_t(def->view_of)];
        t.reshape(c.out[0].shape.to_shape());
        c.folded[0] = std::move(t);
      }
    } else {
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (c.in[i] && !c.value[i])
          fail("{}: unsupported op '{}' (domain {}, opset {}) on device: cldl folds it only on load-time constant "
               "inputs, and input '{}' is not constant",
               n.describe(), n.op_type, domain_name(n.domain), opset, n.inputs[i]);
    }
    for (auto& [i, axis] : c.counted) {  // a stage's counted node carries its count outputs already
      auto it = std::find(n.outputs.begin(), n.outputs.end(), counted_output_name(n.outputs[i]));
      if (it != n.outputs.end()) c.out[size_t(it - n.outputs.begin())] = ValueInfo{*it, DType::i64, Shape{1}};
    }
    bool all_folded = true;
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      if (c.folded[i] && fold) {
        g.initializers[n.outputs[i]] = std::move(*c.folded[i]);
        g.values[n.outputs[i]] = c.out[i];
        n.outputs[i].clear();
      } else {
        all_folded = false;
        if (!c.out[i].shape.is_static()) fail("{}: output '{}' has no static shape", n.describe(), n.outputs[i]);
        // Shapes come from the file: an element count past 2^40 (or one that overflows) is corrupt.
        if (bounded_numel(c.out[i].shape.dims, int64_t(1) << 40) < 0)
          fail("{}: output '{}' would have shape {}: too many elements", n.describe(), n.outputs[i],
               c.out[i].shape.str());
        g.values[n.outputs[i]] = c.out[i];
      }
    }
    if (!c.counted.empty()) {
      // An output shape decided by data: its counts come with the node as extra outputs. With a boundary
      // the stage ends with this node (a counted boundary: what reads its outputs is deferred to the rest,
      // planned per count); without one, only a staged plan's first part, which placed the counts itself,
      // may hold the node.
      std::vector<CountedValue> cv;
      for (auto& [i, axis] : c.counted) {
        cv.push_back({n.outputs[i], counted_output_name(n.outputs[i]), c.out[i].shape.to_shape(), axis});
        g.values[cv.back().count] = ValueInfo{cv.back().count, DType::i64, Shape{1}};
        if (std::find(n.outputs.begin(), n.outputs.end(), cv.back().count) != n.outputs.end()) continue;
        if (!boundary)
          fail("{}: output '{}' has a shape decided by run-time data (at most {}); plan the graph as a Model "
               "(models/model.hpp), which stops there and plans the rest per count",
               n.describe(), n.outputs[i], c.out[i].shape.str());
        n.outputs.push_back(cv.back().count);
      }
      kept.push_back(std::move(n));
      if (boundary) {
        for (auto& o : kept.back().outputs)
          if (!o.empty()) tainted.insert(o);
        stage_counted.insert(stage_counted.end(), cv.begin(), cv.end());
        if (boundary->reason.empty())
          boundary->reason = fmt::format("{}: output shape decided by run-time data", kept.back().describe());
        continue;
      }
      counted.insert(counted.end(), cv.begin(), cv.end());
      continue;
    }
    if (all_folded) ++folded;
    else kept.push_back(std::move(n));
  }
  if (boundary && !stage_counted.empty()) {  // a counted boundary: the rest is what reads the counted outputs
    boundary->hit = true;
    move_deferred();
    rebuild_composites();
    g.nodes = std::move(kept);
    return folded;
  }
  g.nodes = std::move(kept);
  // A stage's counted outputs are its last word: nothing after them in the stage may read the bound shape.
  for (auto& n : g.nodes)
    for (auto& in : n.inputs)
      for (auto& cv : counted)
        if (in == cv.value)
          fail("{}: input '{}' has a shape decided by run-time data; plan the graph as a Model", n.describe(), in);
  // Sequence and optional outputs go out as their tensors (Graph::unpacked_outputs), each a graph output.
  std::vector<ValueInfo> outputs;
  std::set<std::string> listed;
  for (auto& o : g.outputs) {
    Graph::Unpacked u;
    if (!g.values.count(o.name) && unrolls.unpack_output(o.name, u)) {
      for (auto& item : u.items) {
        auto it = g.values.find(item);
        if (it == g.values.end()) fail("graph output '{}': its tensor '{}' is not produced", o.name, item);
        if (listed.insert(item).second) outputs.push_back(it->second);
      }
      g.unpacked_outputs[o.name] = std::move(u);
      continue;
    }
    if (listed.insert(o.name).second) outputs.push_back(o);
  }
  g.outputs = std::move(outputs);
  for (auto& o : g.outputs) {
    auto it = g.values.find(o.name);
    if (it == g.values.end()) fail("graph output '{}' is not produced", o.name);
    if (o.shape.known && o.shape.is_static() && !o.shape.dims.empty() && o.shape.to_shape() != it->second.shape.to_shape())
      fail("graph output '{}': declared shape {} but inferred {}", o.name, o.shape.str(), it->second.shape.str());
    o.dtype = it->second.dtype;
    o.shape = it->second.shape;
  }
  return folded;
}

size_t fold_constants_at_load(Graph& g) {
  // The nodes that read constants only (initializers, and outputs of such nodes), in order: ai.onnx ops,
  // no control flow, no random draws (each plan draws anew), no outer-scope reads.
  static const std::set<std::string> kRandom = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                                "RandomUniformLike", "Bernoulli", "Multinomial"};
  std::set<std::string> constant;
  for (auto& [name, t] : g.initializers) constant.insert(name);
  Graph c;
  c.name = g.name;
  c.opsets = g.opsets;
  std::vector<size_t> taken;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!n.domain.empty() || kRandom.count(n.op_type) || (n.op_type == "Dropout" && n.input_count() > 2) ||
        expanded_when_planning(n) || !n.outer_inputs().empty())
      continue;
    if (!std::all_of(n.inputs.begin(), n.inputs.end(), [&](auto& in) { return in.empty() || constant.count(in); }))
      continue;
    for (auto& in : n.inputs)
      if (!in.empty() && !c.initializers.count(in) && g.initializers.count(in)) c.initializers[in] = g.initializers.at(in);
    for (auto& o : n.outputs)
      if (!o.empty()) constant.insert(o);
    c.nodes.push_back(n);
    taken.push_back(i);
  }
  if (taken.empty()) return 0;
  try {
    infer_shapes(c, true);  // what every plan's inference would fold of them, the same way
  } catch (const Error& e) {
    // Left to the plans, whose error names the signature too.
    log::debug("graph '{}': no constants folded at load: {}", g.name, e.what());
    return 0;
  }
  // A node is folded when each of its outputs is a constant now; one folded in part stays for the plans.
  std::set<size_t> drop;
  for (size_t i : taken) {
    const Node& n = g.nodes[i];
    if (std::all_of(n.outputs.begin(), n.outputs.end(), [&](auto& o) { return o.empty() || c.initializers.count(o); }))
      drop.insert(i);
  }
  for (size_t i : drop)
    for (auto& o : g.nodes[i].outputs)
      if (!o.empty()) g.initializers[o] = c.initializers.at(o);
  erase_nodes(g, drop);
  return drop.size();
}

size_t remove_dead_nodes(Graph& g) {
  std::set<std::string> live;
  for (auto& o : g.outputs) live.insert(o.name);
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    for (auto& o : g.nodes[i].outputs)
      if (!o.empty() && live.count(o)) keep[i] = true;
    if (keep[i]) {
      for (auto& in : g.nodes[i].inputs) live.insert(in);
      for (auto& in : g.nodes[i].outer_inputs()) live.insert(in);
    }
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (keep[i]) kept.push_back(std::move(g.nodes[i]));
  size_t removed = g.nodes.size() - kept.size();
  g.nodes = std::move(kept);
  for (auto it = g.initializers.begin(); it != g.initializers.end();)
    it = live.count(it->first) ? std::next(it) : g.initializers.erase(it);
  return removed;
}

std::vector<std::string> load_time_inputs(const Graph& g) {
  std::set<std::string> r;
  for (auto& n : g.nodes) {
    const OpDef* def = find_op(n.op_type, n.domain);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      // Only arguments that decide shapes; a host-only op on runtime data stays unsupported.
      bool need = def && std::count(def->const_inputs.begin(), def->const_inputs.end(), i) > 0;
      if (need && g.is_input(n.inputs[i])) r.insert(n.inputs[i]);
    }
  }
  return {r.begin(), r.end()};
}

size_t run_fusion_passes(Graph& g, FusionStage stage) {
  // CLDL_SKIP_PASSES=name,name...: leave those fusion passes out, for A/B comparisons of what one buys.
  const char* skip_env = std::getenv("CLDL_SKIP_PASSES");
  const std::string skip = skip_env ? "," + std::string(skip_env) + "," : "";
  size_t total = 0;
  const bool debug = log::level() >= log::Level::debug;
  for (auto& [name, pass, st] : fusion_passes()) {
    if (st != stage) continue;
    if (!skip.empty() && skip.find("," + name + ",") != std::string::npos) {
      log::debug("fusion pass {}: skipped (CLDL_SKIP_PASSES)", name);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    size_t n = pass(g);
    if (debug)  // each pass's time too: the passes run again for every plan
      log::debug("fusion pass {}: {} rewrites, {:.3f} ms", name, n,
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    total += n;
  }
  return total;
}

void bind_inputs(Graph& g, const PrepareOptions& opts, bool require_static) {
  for (auto& bound : opts.bind) {
    const std::string& name = bound.first;  // not a structured binding: clang 14 cannot capture those
    const HostTensor& t = bound.second;
    auto it = std::find_if(g.inputs.begin(), g.inputs.end(), [&](auto& v) { return v.name == name; });
    if (it == g.inputs.end()) fail("cannot bind '{}': not a graph input", name);
    if (it->dtype != t.dtype()) fail("input '{}': bound value is {}, expected {}", name, to_string(t.dtype()), to_string(it->dtype));
    g.initializers[name] = t;
    g.inputs.erase(it);
  }
  for (auto& in : g.inputs) {
    for (size_t i = 0; i < in.shape.dims.size(); ++i) {
      if (in.shape.dims[i] >= 0) continue;
      const std::string sym = i < in.shape.symbols.size() ? in.shape.symbols[i] : std::string();
      auto it = sym.empty() ? opts.dims.end() : opts.dims.find(sym);
      if (it == opts.dims.end()) {
        if (!require_static) continue;
        fail("graph input '{}' dimension {} ('{}') of {} is not fixed: bind it (cldl run --dim {}=N)", in.name, i,
             sym.empty() ? "?" : sym, in.shape.str(), sym.empty() ? "NAME" : sym);
      }
      in.shape.dims[i] = it->second;
    }
  }
}

PassStats prepare_structure(Graph& g) {
  g.sort();
  // Before dead-node removal: a Gradient node keeps the forward nodes it differentiates alive.
  if (prepare_gradients(g)) g.sort();
  PassStats s;
  s.removed_dead = remove_dead_nodes(g);  // first, so an unused unsupported node does not stop the load
  s.fused = run_fusion_passes(g);
  check_supported(g);
  return s;
}

PassStats prepare_shapes(Graph& g, bool fold, PlanBoundary* boundary) {
  PassStats s;
  {
    PhaseTimer t(&PlanPhases::infer_ms);
    s.folded_nodes = infer_shapes(g, fold, boundary);
  }
  if (boundary && boundary->hit) return s;
  size_t typed = 0;
  {
    PhaseTimer t(&PlanPhases::fusion_ms);
    typed = run_fusion_passes(g, FusionStage::typed);
    if (typed) {
      s.fused += typed + run_fusion_passes(g);
      g.sort();
    }
  }
  if (typed) {
    PhaseTimer t(&PlanPhases::infer_ms);
    s.folded_nodes += infer_shapes(g, fold);
  }
  {
    PhaseTimer t(&PlanPhases::dead_ms);
    s.removed_dead += remove_dead_nodes(g);
  }
  PhaseTimer t(&PlanPhases::fusion_ms);
  s.fused += run_fusion_passes(g, FusionStage::late);
  return s;
}

PassStats prepare(Graph& g, const PrepareOptions& opts) {
  bind_inputs(g, opts, true);
  PassStats s = prepare_structure(g);
  PassStats t = prepare_shapes(g, opts.fold_constants);
  s.folded_nodes += t.folded_nodes, s.fused += t.fused, s.removed_dead += t.removed_dead;
  log::debug("prepare '{}': {} nodes folded, {} dead removed, {} fused, {} left", g.name, s.folded_nodes,
             s.removed_dead, s.fused, g.nodes.size());
  return s;
}

namespace {
// `scope` holds the opsets: a subgraph follows its model's imports.
void check_nodes(const Graph& g, const Graph& scope) {
  for (auto& n : g.nodes) {
    if (expanded_when_planning(n)) {
      for (const Graph* sub : control_flow_subgraphs(n)) check_nodes(*sub, scope);
      continue;
    }
    checked_opset(scope, n, find_op(n.op_type, n.domain), find_folder(n.op_type, n.domain));
  }
}
}  // namespace

void check_supported(const Graph& g) { check_nodes(g, g); }

std::vector<std::string> shape_deciding_inputs(const Graph& g) {
  // Walks back from every argument that must be known at plan time (OpDef::const_inputs, and every input
  // of a host-only op) through the nodes that produce it. Shape and Size read only their input's shape,
  // so the walk stops there; integer and bool graph inputs it reaches decide shapes by their values.
  auto prod = g.producers();
  std::set<std::string> seen, r;
  std::vector<std::string> todo;
  // Ops whose output depends on their input's shape only (evaluated on the host, yet no value is read).
  auto shape_only = [](const Node& n) {
    return n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size" || n.op_type == "EyeLike");
  };
  for (auto& n : g.nodes) {
    if (shape_only(n)) continue;
    const OpDef* def = find_op(n.op_type, n.domain);
    bool host_only = !def || (!def->lower && def->view_of < 0);
    std::vector<size_t> decides = control_flow_deciding_inputs(n);
    bool control = expanded_when_planning(n);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      bool need = control ? std::count(decides.begin(), decides.end(), i) > 0
                          : host_only || (def && std::count(def->const_inputs.begin(), def->const_inputs.end(), i) > 0);
      if (need && !n.inputs[i].empty()) todo.push_back(n.inputs[i]);
    }
  }
  while (!todo.empty()) {
    std::string v = todo.back();
    todo.pop_back();
    if (!seen.insert(v).second || g.is_constant(v)) continue;
    if (g.is_input(v)) {
      const ValueInfo* in = nullptr;
      for (auto& x : g.inputs)
        if (x.name == v) in = &x;
      DType t = in->dtype;
      if (t == DType::i64 || t == DType::i32 || t == DType::boolean || t == DType::i8 || t == DType::u8) r.insert(v);
      continue;
    }
    auto p = prod.find(v);
    if (p == prod.end()) continue;
    const Node& n = g.nodes[p->second];
    if (shape_only(n)) continue;
    for (auto& in : n.inputs)
      if (!in.empty()) todo.push_back(in);
  }
  return {r.begin(), r.end()};
}

}  // namespace cldl::graph
