// If / Loop / Scan expansion at plan time (see control_flow.hpp).
#include "models/control_flow.hpp"

#include <functional>
#include <map>
#include <set>

#include "models/autodiff.hpp"
#include "models/op_registry.hpp"
#include "models/passes.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {

// A new initializer of g (an iteration number, a shape, an index); shared with other expansions, as are
// make_node and inline_body (control_flow.hpp).
std::string add_constant(Graph& g, const std::string& base, HostTensor t) {
  std::string name = g.unique_name(base);
  g.values[name] = ValueInfo{name, t.dtype(), t.shape()};
  g.initializers[name] = std::move(t);
  return name;
}

Node make_node(Graph& g, const std::string& base, const std::string& op, std::vector<std::string> in,
               std::vector<std::string> out, std::map<std::string, AttrValue> attrs) {
  Node n;
  n.name = g.unique_name(base);
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

std::vector<Node> inline_body(Graph& g, const Graph& sub, const std::string& prefix,
                              std::map<std::string, std::string> bind, std::vector<std::string>& outs) {
  std::map<std::string, std::string>& rename = bind;
  auto local = [&](const std::string& v) {
    auto it = rename.find(v);
    return it == rename.end() ? v : it->second;
  };
  for (auto& [name, t] : sub.initializers) rename[name] = add_constant(g, prefix + "/" + name, t);
  for (auto& b : sub.nodes)
    for (auto& o : b.outputs)
      if (!o.empty()) rename[o] = g.unique_name(prefix + "/" + o);
  // Nested subgraphs read this body's values by their old names: rename those reads there too.
  std::function<void(Graph&)> fix;
  auto fix_subgraphs = [&](Node& x) {
    for (auto& [k, a] : x.attrs)
      if (auto* sg = std::get_if<SubGraph>(&a); sg && *sg) {
        auto copy = std::make_shared<Graph>(**sg);
        fix(*copy);
        a = SubGraph(std::move(copy));
      }
  };
  fix = [&](Graph& x) {
    for (auto& xn : x.nodes) {
      for (auto& v : xn.inputs) v = local(v);
      fix_subgraphs(xn);
    }
    for (auto& o : x.outputs) o.name = local(o.name);
  };
  std::vector<Node> out;
  for (auto& b : sub.nodes) {
    Node c = b;
    c.name = g.unique_name(prefix + "/" + b.name);
    for (auto& v : c.inputs) v = local(v);
    for (auto& v : c.outputs) v = local(v);
    fix_subgraphs(c);
    out.push_back(std::move(c));
  }
  outs.clear();
  for (auto& o : sub.outputs) outs.push_back(local(o.name));
  return out;
}

namespace {

constexpr const char* kStepOp = "ControlFlowStep";
constexpr const char* kStepDomain = "ai.cldl.control";
// A Scan made from an opset-8 Scan for one batch element: opset 9's semantics whatever the model's opset.
constexpr const char* kScan9 = "_cldl_scan9";
// A Loop continued at run time (remaining_loop): per scan output, how many values of earlier iterations
// its last inputs hold.
constexpr const char* kScanPrefix = "_cldl_scan_prefix";

bool is(const Node& n, const char* op) { return n.op_type == op && n.domain.empty(); }

// The value of `v` when g knows it (an initializer), else null.
const HostTensor* known(const Graph& g, const std::string& v) {
  auto it = g.initializers.find(v);
  return it == g.initializers.end() ? nullptr : &it->second;
}

template <typename... Args>
[[noreturn]] void throw_decision(const std::string& value, fmt::format_string<Args...> f, Args&&... args) {
  throw RuntimeDecision(fmt::format(f, std::forward<Args>(args)...), value);
}

bool truth(const Node& n, const HostTensor& t, const char* what) {
  if (t.numel() != 1) fail("{}: {} has {} elements, expected 1", n.describe(), what, t.numel());
  return to_doubles(t)[0] != 0;
}

}  // namespace

std::vector<const Graph*> control_flow_subgraphs(const Node& n) {
  std::vector<const char*> names;
  if (is(n, "If")) names = {"then_branch", "else_branch"};
  else if (is(n, "Loop") || is(n, "Scan") || is(n, "SequenceMap")) names = {"body"};
  std::vector<const Graph*> r;
  if (is_flex_attention(n)) {  // optional modifiers
    for (const char* a : {"score_mod", "prob_mod"})
      if (const Graph* g = n.attr_g(a)) r.push_back(g);
    return r;
  }
  for (const char* a : names) {
    const Graph* g = n.attr_g(a);
    if (!g) fail("{}: attribute '{}' (a graph) is missing", n.describe(), a);
    r.push_back(g);
  }
  return r;
}

std::vector<size_t> control_flow_deciding_inputs(const Node& n) {
  if (is(n, "If")) return {0};
  if (is(n, "Loop")) return {0, 1};
  if (is(n, "SequenceInsert")) return {2};
  if (is(n, "SequenceErase") || is(n, "SequenceAt") || is(n, "SplitToSequence")) return {1};
  return {};
}

bool expanded_when_planning(const Node& n) {
  return is(n, "If") || is(n, "Loop") || is(n, "Scan") || is_sequence_op(n) || is_optional_op(n) ||
         is_flex_attention(n) || is_gradient(n);
}

bool is_flex_attention(const Node& n) { return n.op_type == "FlexAttention" && n.domain == "ai.onnx.preview"; }

bool is_sequence_op(const Node& n) {
  static const std::set<std::string> ops{"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase",
                                         "SequenceAt",    "SequenceLength",    "ConcatFromSequence",
                                         "SplitToSequence", "SequenceMap"};
  return n.domain.empty() && ops.count(n.op_type);
}

bool is_optional_op(const Node& n) {
  return is(n, "Optional") || is(n, "OptionalHasElement") || is(n, "OptionalGetElement");
}

bool ControlFlowExpander::handles(const Node& n) const {
  return is(n, "If") || is(n, "Loop") || is(n, "Scan") || (n.op_type == kStepOp && n.domain == kStepDomain) ||
         is_sequence_op(n) || is_optional_op(n) ||
         (is(n, "Identity") && !n.inputs.empty() && (sequences_.count(n.inputs[0]) || optionals_.count(n.inputs[0]))) ||
         is_flex_attention(n) || is_gradient(n);
}

const std::vector<std::string>& ControlFlowExpander::sequence(const Node& n, size_t input) const {
  if (input >= n.inputs.size() || n.inputs[input].empty()) fail("{}: input {} (a sequence) is missing", n.describe(), input);
  auto it = sequences_.find(n.inputs[input]);
  if (it == sequences_.end())
    fail("{}: '{}' is not a sequence built in this model (sequences cannot be model inputs)", n.describe(),
         n.inputs[input]);
  return it->second;
}

std::vector<Node> ControlFlowExpander::sequence_op(Graph& g, const Node& n) {
  auto out = [&]() -> const std::string& {
    if (n.outputs.empty() || n.outputs[0].empty()) fail("{}: output 0 is missing", n.describe());
    return n.outputs[0];
  };
  // A position argument: known when planning, negative from the end, within [0, size] (`end` allowed).
  auto position = [&](size_t input, int64_t size, bool end_allowed, int64_t def) -> int64_t {
    if (input >= n.inputs.size() || n.inputs[input].empty()) return def;
    const HostTensor* p = known(g, n.inputs[input]);
    if (!p) throw_decision(n.inputs[input], "{}: position '{}' is computed from run-time data", n.describe(), n.inputs[input]);
    int64_t v = to_ints(*p).at(0), w = v < 0 ? v + size : v;
    if (w < 0 || w > size || (!end_allowed && w == size))
      fail("{}: position {} is outside a sequence of {} tensors", n.describe(), v, size);
    return w;
  };
  std::vector<Node> nodes;
  const std::string& op = n.op_type;
  if (op == "SequenceEmpty") {
    sequences_[out()] = {};
  } else if (op == "SequenceConstruct") {
    sequences_[out()] = n.inputs;
  } else if (op == "Identity") {
    sequences_[out()] = sequence(n, 0);
  } else if (op == "SequenceInsert") {
    auto list = sequence(n, 0);
    if (n.inputs.size() < 2 || n.inputs[1].empty()) fail("{}: the tensor to insert is missing", n.describe());
    int64_t at = position(2, int64_t(list.size()), true, int64_t(list.size()));
    list.insert(list.begin() + at, n.inputs[1]);
    sequences_[out()] = std::move(list);
  } else if (op == "SequenceErase") {
    auto list = sequence(n, 0);
    if (list.empty()) fail("{}: erasing from an empty sequence", n.describe());
    int64_t at = position(1, int64_t(list.size()), false, int64_t(list.size()) - 1);
    list.erase(list.begin() + at);
    sequences_[out()] = std::move(list);
  } else if (op == "SequenceAt") {
    const auto& list = sequence(n, 0);
    int64_t at = position(1, int64_t(list.size()), false, -1);
    if (at < 0) fail("{}: input 'position' is missing", n.describe());
    nodes.push_back(make_node(g, n.name, "Identity", {list[size_t(at)]}, {out()}));
  } else if (op == "SequenceLength") {
    HostTensor len = HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{int64_t(sequence(n, 0).size())});
    g.values[out()] = ValueInfo{out(), DType::i64, Shape{}};
    g.initializers[out()] = std::move(len);
  } else if (op == "ConcatFromSequence") {
    const auto& list = sequence(n, 0);
    if (list.empty()) fail("{}: concatenating an empty sequence", n.describe());
    int64_t axis = n.attr_i("axis", 0);
    bool stack = n.attr_i("new_axis", 0) != 0;
    std::vector<std::string> parts;
    for (auto& v : list) {
      const ValueInfo* info = g.info(v);
      if (!info || !info->shape.is_static()) fail("{}: sequence element '{}' has no static shape", n.describe(), v);
      std::vector<int64_t> dims = info->shape.to_shape().dims;
      int64_t rank = int64_t(dims.size()) + (stack ? 1 : 0), a = axis < 0 ? axis + rank : axis;
      if (a < 0 || a >= rank) fail("{}: axis {} is outside rank {}", n.describe(), axis, rank);
      axis = a;
      if (!stack) {
        parts.push_back(v);
        continue;
      }
      dims.insert(dims.begin() + a, 1);
      std::string shape = add_constant(g, n.name + "/shape", HostTensor::from<int64_t>(Shape{int64_t(dims.size())}, dims));
      std::string r = g.unique_name(v + "/unsqueezed");
      nodes.push_back(make_node(g, n.name + "/unsqueeze", "Reshape", {v, shape}, {r}));
      parts.push_back(r);
    }
    nodes.push_back(make_node(g, n.name, "Concat", parts, {out()}, {{"axis", axis}}));
  } else if (op == "SplitToSequence") {
    const ValueInfo* info = n.inputs.empty() ? nullptr : g.info(n.inputs[0]);
    if (!info || !info->shape.is_static()) fail("{}: input 'input' has no static shape", n.describe());
    Shape s = info->shape.to_shape();
    int64_t axis = n.attr_i("axis", 0), rank = int64_t(s.rank());
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) fail("{}: axis {} is outside rank {}", n.describe(), n.attr_i("axis", 0), rank);
    int64_t len = s[size_t(axis)];
    std::vector<int64_t> sizes;
    bool squeeze = false;
    if (n.inputs.size() < 2 || n.inputs[1].empty()) {
      sizes.assign(size_t(len), 1);
      squeeze = n.attr_i("keepdims", 1) == 0;
    } else {
      const HostTensor* sp = known(g, n.inputs[1]);
      if (!sp) throw_decision(n.inputs[1], "{}: split '{}' is computed from run-time data", n.describe(), n.inputs[1]);
      auto v = to_ints(*sp);
      if (sp->shape().rank() == 0) {
        if (v[0] <= 0) fail("{}: split {} is not positive", n.describe(), v[0]);
        for (int64_t at = 0; at < len; at += v[0]) sizes.push_back(std::min(v[0], len - at));
      } else {
        sizes = v;
        int64_t total = 0;
        for (auto x : v) total += x;
        if (total != len) fail("{}: split sizes add up to {}, the axis has {}", n.describe(), total, len);
      }
    }
    std::vector<std::string> list;
    int64_t at = 0;
    for (int64_t size : sizes) {
      std::string piece = g.unique_name(n.name + "/piece");
      std::vector<int64_t> idx(static_cast<size_t>(size));
      for (int64_t k = 0; k < size; ++k) idx[size_t(k)] = at + k;
      std::string indices = squeeze ? add_constant(g, n.name + "/index", HostTensor::from<int64_t>(Shape{}, idx))
                                    : add_constant(g, n.name + "/index", HostTensor::from<int64_t>(Shape{size}, idx));
      nodes.push_back(make_node(g, n.name + "/gather", "Gather", {n.inputs[0], indices}, {piece}, {{"axis", axis}}));
      list.push_back(piece);
      at += size;
    }
    sequences_[out()] = std::move(list);
  }
  return nodes;
}

std::vector<Node> ControlFlowExpander::expand(Graph& g, const Node& n) {
  if (n.op_type == kStepOp) return step(g, size_t(n.attr_i("unroll", 0)));
  if (is_optional_op(n) || (is(n, "Identity") && optionals_.count(n.inputs[0]))) return optional_op(g, n);
  if (is(n, "SequenceMap")) return sequence_map(g, n);
  if (is_sequence_op(n) || is(n, "Identity")) return sequence_op(g, n);
  if (is_flex_attention(n)) return expand_flex_attention(g, n);
  if (is_gradient(n)) return expand_gradient(g, n);
  if (is(n, "If")) {
    if (n.inputs.empty() || n.inputs[0].empty()) fail("{}: input 'cond' is missing", n.describe());
    const HostTensor* cond = known(g, n.inputs[0]);
    if (!cond)
      throw_decision(n.inputs[0], "{}: the condition '{}' is computed from run-time data: the run reads it back here and plans "
           "the branch it picks",
           n.describe(), n.inputs[0]);
    bool take = truth(n, *cond, "the condition");
    const char* which = take ? "then_branch" : "else_branch";
    const Graph* sub = n.attr_g(which);
    if (!sub) fail("{}: attribute '{}' is missing", n.describe(), which);
    if (sub->outputs.size() != n.outputs.size())
      fail("{}: '{}' has {} outputs, the node {}", n.describe(), which, sub->outputs.size(), n.outputs.size());
    std::vector<std::string> outs;
    auto nodes = inline_body(g, *sub, n.name, {}, outs);
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (!n.outputs[i].empty())
        nodes.push_back(make_node(g, n.name + "/output", "Identity", {outs[i]}, {n.outputs[i]}));
    log::debug("{}: condition {}, '{}' inlined ({} nodes)", n.describe(), take, which, sub->nodes.size());
    return nodes;
  }

  Unroll u;
  u.node = n;
  u.body = control_flow_subgraphs(n)[0];
  const Graph& body = *u.body;
  if (is(n, "Loop")) {
    u.loop = true;
    if (n.inputs.size() < 2) fail("{}: Loop needs inputs M and cond (either may be empty)", n.describe());
    if (!n.inputs[0].empty()) {
      const HostTensor* m = known(g, n.inputs[0]);
      if (!m)
        throw_decision(n.inputs[0], "{}: the trip count '{}' is computed from run-time data; cldl runs a Loop whose trip count and "
             "condition are known when planning",
             n.describe(), n.inputs[0]);
      if (m->numel() != 1) fail("{}: the trip count has {} elements, expected 1", n.describe(), m->numel());
      u.trips = to_ints(*m)[0];
    }
    u.cond = n.inputs[1];
    if (u.trips < 0 && u.cond.empty()) fail("{}: a Loop with neither a trip count nor a condition never ends", n.describe());
    // A continuation (remaining_loop) carries the scan values of the iterations before it as extra inputs.
    const std::vector<int64_t> prefix = n.attr_ints(kScanPrefix);
    size_t prefix_total = 0;
    for (int64_t c : prefix) prefix_total += size_t(c);
    if (prefix_total > n.inputs.size() - 2) fail("{}: {} scan values before it, {} inputs", n.describe(), prefix_total, n.inputs.size());
    u.carried.assign(n.inputs.begin() + 2, n.inputs.end() - std::ptrdiff_t(prefix_total));
    if (body.inputs.size() != 2 + u.carried.size())
      fail("{}: the body has {} inputs, expected 2 + {} loop-carried", n.describe(), body.inputs.size(), u.carried.size());
    if (body.outputs.size() < 1 + u.carried.size() || n.outputs.size() != body.outputs.size() - 1)
      fail("{}: the body has {} outputs and the node {}; expected 1 + {} loop-carried + scan outputs, the node one "
           "fewer",
           n.describe(), body.outputs.size(), n.outputs.size(), u.carried.size());
    u.scans.resize(body.outputs.size() - 1 - u.carried.size());
    if (!prefix.empty()) {
      if (prefix.size() != u.scans.size())
        fail("{}: scan values before it for {} scan outputs, the body has {}", n.describe(), prefix.size(), u.scans.size());
      auto at = n.inputs.end() - std::ptrdiff_t(prefix_total);
      for (size_t k = 0; k < prefix.size(); ++k) {
        u.scans[k].assign(at, at + prefix[k]);
        at += prefix[k];
      }
    }
    u.out_axes.assign(u.scans.size(), 0);
    u.out_reverse.assign(u.scans.size(), 0);
  } else {
    if (g.opset("") < 9 && !n.has(kScan9)) return scan8(g, n);
    int64_t k = n.attr_i("num_scan_inputs", -1);
    if (k < 1 || size_t(k) > n.inputs.size())
      fail("{}: num_scan_inputs is {}, the node has {} inputs", n.describe(), k, n.inputs.size());
    size_t states = n.inputs.size() - size_t(k);
    u.carried.assign(n.inputs.begin(), n.inputs.begin() + std::ptrdiff_t(states));
    u.scan_in.assign(n.inputs.begin() + std::ptrdiff_t(states), n.inputs.end());
    if (body.inputs.size() != n.inputs.size())
      fail("{}: the body has {} inputs, the node {}", n.describe(), body.inputs.size(), n.inputs.size());
    if (body.outputs.size() != n.outputs.size() || n.outputs.size() < states)
      fail("{}: the body has {} outputs, the node {}", n.describe(), body.outputs.size(), n.outputs.size());
    u.scans.resize(n.outputs.size() - states);
    u.in_axes = n.attr_ints("scan_input_axes", std::vector<int64_t>(u.scan_in.size(), 0));
    u.in_reverse = n.attr_ints("scan_input_directions", std::vector<int64_t>(u.scan_in.size(), 0));
    u.out_axes = n.attr_ints("scan_output_axes", std::vector<int64_t>(u.scans.size(), 0));
    u.out_reverse = n.attr_ints("scan_output_directions", std::vector<int64_t>(u.scans.size(), 0));
    if (u.in_axes.size() != u.scan_in.size() || u.in_reverse.size() != u.scan_in.size() ||
        u.out_axes.size() != u.scans.size() || u.out_reverse.size() != u.scans.size())
      fail("{}: scan_input_axes / directions need one value per scan input ({}), scan_output_axes / directions one "
           "per scan output ({})",
           n.describe(), u.scan_in.size(), u.scans.size());
    for (size_t j = 0; j < u.scan_in.size(); ++j) {
      const ValueInfo* in = g.info(u.scan_in[j]);
      if (!in || !in->shape.is_static()) fail("{}: scan input '{}' has no static shape", n.describe(), u.scan_in[j]);
      Shape s = in->shape.to_shape();
      int64_t axis = u.in_axes[j] < 0 ? u.in_axes[j] + int64_t(s.rank()) : u.in_axes[j];
      if (axis < 0 || axis >= int64_t(s.rank()))
        fail("{}: scan_input_axes[{}] = {} is outside rank {}", n.describe(), j, u.in_axes[j], s.rank());
      u.in_axes[j] = axis;
      if (u.trips >= 0 && s[size_t(axis)] != u.trips)
        fail("{}: scan input '{}' has {} steps along axis {}, an earlier one {}", n.describe(), u.scan_in[j],
             s[size_t(axis)], axis, u.trips);
      u.trips = s[size_t(axis)];
    }
  }
  // A trip count past the bound with a condition (torch's `while` exports INT64_MAX) is bounded by the
  // condition; the step that would exceed the bound is the error.
  if (u.trips > kMaxUnrolledIterations && !(u.loop && !u.cond.empty()))
    fail("{}: {} iterations; cldl expands at most {} per node when planning", n.describe(), u.trips,
         kMaxUnrolledIterations);
  unrolls_.push_back(std::move(u));
  return step(g, unrolls_.size() - 1);
}

std::vector<Node> ControlFlowExpander::step(Graph& g, size_t index) {
  Unroll& u = unrolls_.at(index);
  const Node& n = u.node;
  const Graph& body = *u.body;
  bool go = u.trips < 0 || u.t < u.trips;
  if (go && u.loop && !u.cond.empty()) {
    const HostTensor* c = known(g, u.cond);
    if (!c)
      throw_decision(u.cond, "{}: the condition '{}' of iteration {} is computed from run-time data: the run reads it back "
           "here and plans the iterations after it",
           n.describe(), u.cond, u.t);
    go = truth(n, *c, "the condition");
  }
  if (go) {
    if (u.t >= kMaxUnrolledIterations)
      fail("{}: more than {} iterations; cldl expands at most that many per node when planning", n.describe(),
           kMaxUnrolledIterations);
    std::map<std::string, std::string> bind;
    std::vector<Node> nodes;
    const std::string prefix = fmt::format("{}/iteration_{}", n.name, u.t);
    size_t first_carried = u.loop ? 2 : 0;
    if (u.loop) {
      bind[body.inputs[0].name] = add_constant(g, prefix + "/iteration", HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{u.t}));
      if (u.cond.empty()) {
        HostTensor yes(DType::boolean, Shape{});
        *static_cast<uint8_t*>(yes.data()) = 1;
        bind[body.inputs[1].name] = add_constant(g, prefix + "/cond", yes);
      } else {
        bind[body.inputs[1].name] = u.cond;
      }
    }
    for (size_t i = 0; i < u.carried.size(); ++i) bind[body.inputs[first_carried + i].name] = u.carried[i];
    for (size_t j = 0; j < u.scan_in.size(); ++j) {
      const ValueInfo* in = g.info(u.scan_in[j]);
      int64_t len = in->shape.to_shape()[size_t(u.in_axes[j])];
      int64_t at = u.in_reverse[j] ? len - 1 - u.t : u.t;
      std::string idx = add_constant(g, prefix + "/index", HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{at}));
      std::string slice = g.unique_name(prefix + "/" + body.inputs[u.carried.size() + j].name);
      nodes.push_back(make_node(g, prefix + "/slice", "Gather", {u.scan_in[j], idx}, {slice}, {{"axis", u.in_axes[j]}}));
      bind[body.inputs[u.carried.size() + j].name] = slice;
    }
    std::vector<std::string> outs;
    auto it = inline_body(g, body, prefix, bind, outs);
    nodes.insert(nodes.end(), std::make_move_iterator(it.begin()), std::make_move_iterator(it.end()));
    size_t o = 0;
    if (u.loop) u.cond = outs[o++];
    for (auto& c : u.carried) c = outs[o++];
    for (auto& s : u.scans) s.push_back(outs[o++]);
    ++u.t;
    Node marker = make_node(g, n.name + "/step", kStepOp, {}, {}, {{"unroll", int64_t(index)}});
    marker.domain = kStepDomain;
    nodes.push_back(std::move(marker));
    return nodes;
  }
  // Done: the carried values are the node's first outputs, the scan outputs stacked along their axis.
  std::vector<Node> nodes;
  std::vector<ValueInfo> elements;  // for scan outputs of zero iterations
  for (size_t i = 0; i < u.carried.size(); ++i)
    if (!n.outputs[i].empty()) nodes.push_back(make_node(g, n.name + "/output", "Identity", {u.carried[i]}, {n.outputs[i]}));
  for (size_t k = 0; k < u.scans.size(); ++k) {
    const std::string& out = n.outputs[u.carried.size() + k];
    if (out.empty()) continue;
    if (u.scans[k].empty()) {  // zero iterations: an empty tensor, a constant of the plan
      if (elements.empty()) elements = scan_elements(g, u);
      std::vector<int64_t> dims = elements[k].shape.to_shape().dims;
      int64_t axis = u.out_axes[k] < 0 ? u.out_axes[k] + int64_t(dims.size()) + 1 : u.out_axes[k];
      if (axis < 0 || axis > int64_t(dims.size()))
        fail("{}: scan_output_axes[{}] = {} is outside rank {}", n.describe(), k, u.out_axes[k], dims.size() + 1);
      dims.insert(dims.begin() + axis, 0);
      HostTensor empty(elements[k].dtype, Shape{dims});
      g.values[out] = ValueInfo{out, empty.dtype(), empty.shape()};
      g.initializers[out] = std::move(empty);
      continue;
    }
    std::vector<std::string> parts;
    for (auto& v : u.scans[k]) {
      const ValueInfo* info = g.info(v);
      if (!info || !info->shape.is_static()) fail("{}: scan output '{}' has no static shape", n.describe(), v);
      std::vector<int64_t> dims = info->shape.to_shape().dims;
      int64_t axis = u.out_axes[k] < 0 ? u.out_axes[k] + int64_t(dims.size()) + 1 : u.out_axes[k];
      if (axis < 0 || axis > int64_t(dims.size()))
        fail("{}: scan_output_axes[{}] = {} is outside rank {}", n.describe(), k, u.out_axes[k], dims.size() + 1);
      dims.insert(dims.begin() + axis, 1);
      std::string shape = add_constant(g, n.name + "/stack_shape", HostTensor::from<int64_t>(Shape{int64_t(dims.size())}, dims));
      std::string r = g.unique_name(v + "/stacked");
      nodes.push_back(make_node(g, n.name + "/stack", "Reshape", {v, shape}, {r}));
      parts.push_back(r);
      u.out_axes[k] = axis;
    }
    if (u.out_reverse[k]) std::reverse(parts.begin(), parts.end());
    nodes.push_back(make_node(g, n.name + "/concat", "Concat", parts, {out}, {{"axis", u.out_axes[k]}}));
  }
  log::debug("{}: {} iterations expanded", n.describe(), u.t);
  return nodes;
}

std::vector<ValueInfo> ControlFlowExpander::scan_elements(const Graph& g, const Unroll& u) const {
  const Node& n = u.node;
  const Graph& body = *u.body;
  const size_t first_carried = u.loop ? 2 : 0, first_scan = (u.loop ? 1 : 0) + u.carried.size();
  // The body once on its first iteration's inputs, inferred in a graph of its own (nothing of it runs):
  // iteration 0 and a true condition, the initial loop-carried values, and for a Scan a placeholder of
  // one step of each scan input. Outer values it reads are that graph's inputs (constants stay constants;
  // sequences and optionals are built again from their tensors).
  std::string why;
  std::vector<ValueInfo> r;
  try {
    Graph probe;
    probe.name = g.name;
    probe.opsets = g.opsets;
    probe.initializers = g.initializers;  // shared bytes
    probe.values = g.values;              // names made here stay apart from g's (inference starts afresh)
    std::map<std::string, std::string> bind;
    if (u.loop) {
      bind[body.inputs[0].name] = add_constant(probe, "iteration", HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{0}));
      HostTensor yes(DType::boolean, Shape{});
      *static_cast<uint8_t*>(yes.data()) = 1;
      bind[body.inputs[1].name] = add_constant(probe, "cond", yes);
    }
    for (size_t i = 0; i < u.carried.size(); ++i) bind[body.inputs[first_carried + i].name] = u.carried[i];
    for (size_t j = 0; j < u.scan_in.size(); ++j) {
      Shape s = g.info(u.scan_in[j])->shape.to_shape();
      s.dims.erase(s.dims.begin() + u.in_axes[j]);
      const std::string step = probe.unique_name(body.inputs[u.carried.size() + j].name + "/step");
      probe.inputs.push_back(ValueInfo{step, g.info(u.scan_in[j])->dtype, s});
      bind[body.inputs[u.carried.size() + j].name] = step;
    }
    std::vector<std::string> outs;
    std::vector<Node> nodes = inline_body(probe, body, n.name + "/probe", bind, outs);
    // What the probe reads from outside: produced by none of its nodes, not a constant, not bound above.
    std::set<std::string> produced, reads;
    for (auto& in : probe.inputs) produced.insert(in.name);
    for (auto& b : nodes) {
      for (auto& o : b.outputs) produced.insert(o);
      for (auto& v : b.inputs) reads.insert(v);
      for (auto& v : b.outer_inputs()) reads.insert(v);
    }
    reads.insert(outs.begin(), outs.end());
    std::vector<std::string> outer;
    for (auto& v : reads)
      if (!v.empty() && !produced.count(v) && !probe.initializers.count(v)) outer.push_back(v);
    std::vector<Node> front = rebuild(probe, outer);
    std::set<std::string> composite;
    for (auto& f : front) composite.insert(f.outputs[0]);
    for (auto& f : front) outer.insert(outer.end(), f.inputs.begin(), f.inputs.end());
    std::set<std::string> listed;
    for (auto& v : outer) {
      if (composite.count(v) || probe.initializers.count(v) || !listed.insert(v).second) continue;
      const ValueInfo* info = g.info(v);
      if (!info) fail("'{}' is not defined", v);
      probe.inputs.push_back(*info);
    }
    nodes.insert(nodes.begin(), std::make_move_iterator(front.begin()), std::make_move_iterator(front.end()));
    probe.nodes = std::move(nodes);
    for (size_t k = 0; k < u.scans.size(); ++k) {
      ValueInfo o{outs.at(first_scan + k), DType::f32, ValueShape{}};
      o.shape.known = false;
      probe.outputs.push_back(o);
    }
    infer_shapes(probe, true);
    for (auto& o : probe.outputs) r.push_back(o);
    return r;
  } catch (const Error& e) {
    why = e.what();
  }
  // Inference of the body did not go through (a decision on data it would compute, say): the body's
  // declared output types, with ONNX Runtime's rule for what they leave open (a symbolic dim is 0).
  r.clear();
  for (size_t k = 0; k < u.scans.size(); ++k) {
    const ValueInfo& d = body.outputs.at(first_scan + k);
    if (!d.shape.known)
      fail("{}: zero iterations: the shape of scan output '{}' is not known: the body's output '{}' declares no "
           "shape, and inferring one iteration failed: {}",
           n.describe(), n.outputs.at(u.carried.size() + k), d.name, why);
    Shape s(d.shape.dims);
    for (auto& x : s.dims) x = std::max<int64_t>(x, 0);
    log::info("{}: zero iterations: scan output '{}' takes its element shape {} from the body's declared {} "
              "(inferring one iteration failed: {})",
              n.describe(), n.outputs.at(u.carried.size() + k), s.str(), d.shape.str(), why);
    r.push_back(ValueInfo{d.name, d.dtype, s});
  }
  return r;
}

Node ControlFlowExpander::remaining_loop(Graph& g, const Node& marker) {
  // Other nodes this expander handles (FlexAttention, Gradient) are expanded in one go: still whole.
  if (marker.op_type != kStepOp || marker.domain != kStepDomain) return marker;
  const Unroll& u = unrolls_.at(size_t(marker.attr_i("unroll", 0)));
  const Node& n = u.node;
  if (u.t == 0 || !u.loop) return n;  // nothing expanded yet: the node itself
  Node r = n;
  r.name = g.unique_name(n.name + "/from_iteration_" + std::to_string(u.t));
  r.inputs = {u.trips < 0 ? std::string() : add_constant(g, r.name + "/M", HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{u.trips - u.t})),
              u.cond};
  r.inputs.insert(r.inputs.end(), u.carried.begin(), u.carried.end());
  // Scan outputs: the iterations done so far travel as extra inputs (kScanPrefix counts them per scan
  // output), and the continuation stacks them before its own.
  if (!u.scans.empty()) {
    std::vector<int64_t> counts;
    for (auto& vals : u.scans) {
      counts.push_back(int64_t(vals.size()));
      r.inputs.insert(r.inputs.end(), vals.begin(), vals.end());
    }
    r.attrs[kScanPrefix] = counts;
  }
  // The body counts from 0 again: its iteration input becomes iteration + t.
  auto body = std::make_shared<Graph>(*u.body);
  const std::string iter = body->inputs[0].name, shifted = iter + "/from_0";
  body->inputs[0].name = shifted;
  const std::string offset = iter + "/offset";
  body->initializers[offset] = HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{u.t});
  Node add;
  add.name = iter + "/shift";
  add.op_type = "Add";
  add.inputs = {shifted, offset};
  add.outputs = {iter};
  body->nodes.insert(body->nodes.begin(), add);
  r.attrs["body"] = SubGraph(std::move(body));
  return r;
}

std::vector<Node> ControlFlowExpander::optional_op(Graph& g, const Node& n) {
  if (n.outputs.empty() || n.outputs[0].empty()) fail("{}: output 0 is missing", n.describe());
  const std::string& out = n.outputs[0];
  const std::string in = n.inputs.empty() ? std::string() : n.inputs[0];
  if (is(n, "Identity")) {
    optionals_[out] = optionals_.at(in);
    return {};
  }
  if (is(n, "Optional")) {  // without an input: an absent optional of the `type` attribute's type
    if (!in.empty() && optionals_.count(in)) fail("{}: '{}' is already an optional", n.describe(), in);
    optionals_[out] = in;
    return {};
  }
  // What `in` holds ("" when absent): an optional's content; a tensor or a sequence is one that holds itself.
  std::string held = in;
  if (auto it = optionals_.find(in); it != optionals_.end()) held = it->second;
  if (is(n, "OptionalHasElement")) {
    HostTensor has(DType::boolean, Shape{});
    *static_cast<uint8_t*>(has.data()) = held.empty() ? 0 : 1;
    g.values[out] = ValueInfo{out, DType::boolean, Shape{}};
    g.initializers[out] = std::move(has);
    return {};
  }
  // OptionalGetElement
  if (held.empty()) fail("{}: the optional '{}' is empty", n.describe(), in);
  if (auto s = sequences_.find(held); s != sequences_.end()) {
    sequences_[out] = s->second;
    return {};
  }
  return {make_node(g, n.name, "Identity", {held}, {out})};
}

std::vector<Node> ControlFlowExpander::sequence_map(Graph& g, const Node& n) {
  const Graph& body = *control_flow_subgraphs(n)[0];
  if (body.inputs.size() != n.inputs.size())
    fail("{}: the body has {} inputs, the node {}", n.describe(), body.inputs.size(), n.inputs.size());
  if (body.outputs.size() != n.outputs.size())
    fail("{}: the body has {} outputs, the node {}", n.describe(), body.outputs.size(), n.outputs.size());
  const size_t len = sequence(n, 0).size();
  for (size_t j = 1; j < n.inputs.size(); ++j)
    if (sequences_.count(n.inputs[j]) && sequences_.at(n.inputs[j]).size() != len)
      fail("{}: input {} ('{}') has {} tensors, input 0 has {}", n.describe(), j, n.inputs[j],
           sequences_.at(n.inputs[j]).size(), len);
  std::vector<std::vector<std::string>> lists(n.outputs.size());
  std::vector<Node> nodes;
  for (size_t i = 0; i < len; ++i) {
    std::map<std::string, std::string> bind;
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      auto s = sequences_.find(n.inputs[j]);
      bind[body.inputs[j].name] = s != sequences_.end() ? s->second[i] : n.inputs[j];
    }
    std::vector<std::string> outs;
    auto it = inline_body(g, body, fmt::format("{}/element_{}", n.name, i), bind, outs);
    nodes.insert(nodes.end(), std::make_move_iterator(it.begin()), std::make_move_iterator(it.end()));
    for (size_t k = 0; k < outs.size(); ++k) lists[k].push_back(outs[k]);
  }
  for (size_t k = 0; k < n.outputs.size(); ++k)
    if (!n.outputs[k].empty()) sequences_[n.outputs[k]] = std::move(lists[k]);
  return nodes;
}

bool ControlFlowExpander::unpack_output(const std::string& value, Graph::Unpacked& out) const {
  std::string held = value;
  if (auto o = optionals_.find(value); o != optionals_.end()) {
    held = o->second;
    if (held.empty()) {
      out = {ModelValue::Kind::none, {}};
      return true;
    }
    if (!sequences_.count(held)) {
      out = {ModelValue::Kind::tensor, {held}};
      return true;
    }
  }
  auto s = sequences_.find(held);
  if (s == sequences_.end()) return false;
  out = {ModelValue::Kind::sequence, s->second};
  return true;
}

std::vector<Node> ControlFlowExpander::rebuild(Graph& g, const std::vector<std::string>& values) const {
  std::vector<Node> nodes;
  std::set<std::string> done;
  std::function<void(const std::string&)> build = [&](const std::string& v) {
    if (v.empty() || done.count(v)) return;
    if (auto s = sequences_.find(v); s != sequences_.end()) {
      done.insert(v);
      nodes.push_back(make_node(g, v + "/rebuilt", s->second.empty() ? "SequenceEmpty" : "SequenceConstruct",
                                s->second, {v}));
    } else if (auto o = optionals_.find(v); o != optionals_.end()) {
      done.insert(v);
      build(o->second);  // a sequence it holds comes first
      nodes.push_back(make_node(g, v + "/rebuilt", "Optional",
                                o->second.empty() ? std::vector<std::string>{} : std::vector<std::string>{o->second}, {v}));
    }
  };
  for (auto& v : values) build(v);
  return nodes;
}

// Scan of opset 8: a batch axis 0 on every state and scan input (scan inputs are [batch, steps, ...]),
// optional sequence_lens, `directions`. It becomes one opset-9 Scan per batch element (a Gather of that
// element from each input), whose outputs are stacked back along axis 0. Sequence lengths shorter than
// the scan inputs' steps are refused (the padding of their outputs is not modelled).
std::vector<Node> ControlFlowExpander::scan8(Graph& g, const Node& n) {
  const int64_t k = n.attr_i("num_scan_inputs", -1);
  if (n.inputs.empty()) fail("{}: Scan (opset 8) needs its sequence_lens input (it may be empty)", n.describe());
  if (k < 1 || size_t(k) + 1 > n.inputs.size())
    fail("{}: num_scan_inputs is {}, the node has {} inputs after sequence_lens", n.describe(), k, n.inputs.size() - 1);
  const size_t states = n.inputs.size() - 1 - size_t(k);
  if (n.outputs.size() < states) fail("{}: {} outputs for {} states", n.describe(), n.outputs.size(), states);
  int64_t batch = -1, steps = -1;
  for (size_t i = 1; i < n.inputs.size(); ++i) {
    const ValueInfo* in = g.info(n.inputs[i]);
    if (!in || !in->shape.is_static()) fail("{}: input '{}' has no static shape", n.describe(), n.inputs[i]);
    Shape s = in->shape.to_shape();
    const bool scan = i > states;
    if (s.rank() < (scan ? 2u : 1u))
      fail("{}: input '{}' has shape {}; opset 8 wants [batch, ...] states and [batch, steps, ...] scan inputs",
           n.describe(), n.inputs[i], s.str());
    if (batch >= 0 && s[0] != batch)
      fail("{}: input '{}' has batch {}, an earlier input {}", n.describe(), n.inputs[i], s[0], batch);
    batch = s[0];
    if (scan) steps = s[1];
  }
  if (!n.inputs[0].empty()) {
    const HostTensor* lens = known(g, n.inputs[0]);
    if (!lens)
      throw_decision(n.inputs[0], "{}: sequence_lens '{}' is computed from run-time data", n.describe(), n.inputs[0]);
    for (int64_t len : to_ints(*lens))
      if (len != steps)
        fail("{}: sequence_lens holds {}, the scan inputs have {} steps; cldl runs opset-8 Scans whose sequences "
             "are all full length",
             n.describe(), len, steps);
  }
  std::vector<Node> nodes;
  std::vector<std::vector<std::string>> per_batch(n.outputs.size());
  for (int64_t b = 0; b < batch; ++b) {
    const std::string prefix = fmt::format("{}/batch_{}", n.name, b);
    std::string idx = add_constant(g, prefix + "/index", HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{b}));
    Node scan = make_node(g, prefix, "Scan", {}, {}, {{"body", n.attrs.at("body")}, {"num_scan_inputs", k}, {kScan9, int64_t(1)}});
    if (n.has("directions")) scan.attrs["scan_input_directions"] = n.attr_ints("directions");
    for (size_t i = 1; i < n.inputs.size(); ++i) {
      std::string part = g.unique_name(prefix + "/" + n.inputs[i]);
      nodes.push_back(make_node(g, prefix + "/gather", "Gather", {n.inputs[i], idx}, {part}, {{"axis", int64_t(0)}}));
      scan.inputs.push_back(part);
    }
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      scan.outputs.push_back(n.outputs[o].empty() ? std::string() : g.unique_name(prefix + "/output"));
      per_batch[o].push_back(scan.outputs.back());
    }
    nodes.push_back(std::move(scan));
  }
  // Each element's output gets the batch axis back (Unsqueeze at 0: an attribute before opset 13), then
  // the elements are concatenated.
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    if (n.outputs[o].empty()) continue;
    std::vector<std::string> parts;
    for (auto& v : per_batch[o]) {
      parts.push_back(g.unique_name(v + "/batched"));
      nodes.push_back(make_node(g, n.name + "/unsqueeze", "Unsqueeze", {v}, {parts.back()},
                                {{"axes", std::vector<int64_t>{0}}}));
    }
    nodes.push_back(make_node(g, n.name + "/concat", "Concat", parts, {n.outputs[o]}, {{"axis", int64_t(0)}}));
  }
  return nodes;
}

}  // namespace cldl::graph
