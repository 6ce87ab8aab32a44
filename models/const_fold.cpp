// General constant folding on the device (models/const_fold.hpp).
#include "models/const_fold.hpp"

#include <set>

#include "models/op_registry.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {
namespace {

// Ops whose output must differ between runs (random draws): never folded.
bool random_op(const Node& n) {
  static const std::set<std::string> k = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                          "Bernoulli", "Multinomial"};
  return k.count(n.op_type) != 0 || (n.op_type == "Dropout" && n.input_count() > 2);
}

}  // namespace

size_t fold_constants_on_device(const std::shared_ptr<Context>& ctx, Graph& g, const CompileOptions& opts) {
  std::set<std::string> constant;  // initializers and outputs of nodes folded so far
  for (auto& [name, t] : g.initializers) constant.insert(name);
  std::set<std::string> graph_outputs;
  for (auto& o : g.outputs) graph_outputs.insert(o.name);
  std::vector<size_t> fold;
  int64_t total_bytes = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (random_op(n) || !n.outer_inputs().empty() || n.input_count() == 0) continue;
    const OpDef* def = find_op(n.op_type, n.domain);
    if (!def || (!def->lower && def->view_of < 0)) continue;
    bool ok = true;
    for (auto& in : n.inputs) ok = ok && (in.empty() || constant.count(in));
    int64_t bytes = 0;
    for (auto& o : n.outputs) {
      if (o.empty()) continue;
      auto v = g.values.find(o);
      ok = ok && !graph_outputs.count(o) && v != g.values.end() && v->second.shape.is_static();
      if (ok) bytes += v->second.shape.to_shape().numel() * int64_t(dtype_size(v->second.dtype));
    }
    // Large products stay run-time work: folding would keep a host copy and upload it for every plan.
    if (!ok || bytes > kMaxFoldBytes || total_bytes + bytes > 4 * kMaxFoldBytes) continue;
    total_bytes += bytes;
    fold.push_back(i);
    for (auto& o : n.outputs)
      if (!o.empty()) constant.insert(o);
  }
  if (fold.empty()) return 0;
  // The folded nodes as a graph of their own: no inputs, the values the rest reads as outputs.
  std::set<size_t> folded(fold.begin(), fold.end());
  std::set<std::string> needed;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (folded.count(i)) continue;
    for (auto& in : g.nodes[i].inputs) needed.insert(in);
    for (auto& in : g.nodes[i].outer_inputs()) needed.insert(in);
  }
  Graph c;
  c.name = g.name + " (constants)";
  c.opsets = g.opsets;
  std::set<std::string> reads;
  for (size_t i : fold) {
    c.nodes.push_back(g.nodes[i]);
    for (auto& in : g.nodes[i].inputs)
      if (!in.empty()) reads.insert(in);
  }
  for (auto& r : reads)
    if (auto it = g.initializers.find(r); it != g.initializers.end()) c.initializers[r] = it->second;
  for (size_t i : fold)
    for (auto& o : g.nodes[i].outputs)
      if (!o.empty() && needed.count(o)) c.outputs.push_back(g.values.at(o));
  if (c.outputs.empty()) return 0;  // dead: dead-node removal's business
  for (auto& [name, v] : g.values)
    if (reads.count(name) || constant.count(name)) c.values[name] = v;
  CompileOptions co;
  co.device = opts.device;
  co.constants = opts.constants;
  std::map<std::string, HostTensor> out;
  try {
    out = CompiledModel::compile(ctx, std::move(c), co)->session()->run({});
  } catch (const Error& e) {
    // The nodes then run with the model, where the same error (if it is one) names the node in context.
    log::warn("constant folding of {} nodes of '{}' on the device failed; they run at run time: {}", fold.size(),
              g.name, e.what());
    return 0;
  }
  for (auto& [name, t] : out) g.initializers[name] = std::move(t);
  std::set<size_t> drop(fold.begin(), fold.end());
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!drop.count(i)) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  // Initializers only the folded nodes read are not uploaded with the plan.
  std::set<std::string> read;
  for (auto& n : g.nodes) {
    for (auto& in : n.inputs) read.insert(in);
    for (auto& in : n.outer_inputs()) read.insert(in);
  }
  for (auto it = g.initializers.begin(); it != g.initializers.end();)
    it = read.count(it->first) || graph_outputs.count(it->first) ? std::next(it) : g.initializers.erase(it);
  log::debug("'{}': {} nodes with constant inputs evaluated on the device at plan time ({} bytes kept)", g.name,
             fold.size(), total_bytes);
  return fold.size();
}

}  // namespace cldl::graph
