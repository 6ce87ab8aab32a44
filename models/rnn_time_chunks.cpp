// LSTM / GRU training in time chunks (a typed pass): the pipelined schedule of recurrent layers that span
// devices (models/rnn_time_chunks.hpp).
#include "models/rnn_time_chunks.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "models/control_flow.hpp"
#include "models/op_registry.hpp"
#include "models/passes.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {
namespace {

bool is_train_forward(const Node& n) {
  return n.domain == kFusedDomain && (n.op_type == "LSTMTrain" || n.op_type == "GRUTrain");
}
bool is_rnn_grad(const Node& n) { return n.domain == kFusedDomain && n.op_type == "RNNGrad"; }

std::optional<Shape> static_shape(const Graph& g, const std::string& v) {
  auto it = g.values.find(v);
  if (v.empty() || it == g.values.end() || !it->second.shape.is_static()) return std::nullopt;
  return it->second.shape.to_shape();
}

std::string sizes_constant(Graph& g, const std::string& base, const std::vector<int64_t>& sizes) {
  const std::string c = add_constant(g, base, HostTensor::from<int64_t>(Shape{int64_t(sizes.size())}, sizes));
  g.values[c] = ValueInfo{c, DType::i64, ValueShape(Shape{int64_t(sizes.size())})};
  return c;
}

// Shape `s` with its axis `axis` set to `n`.
Shape with_axis(Shape s, size_t axis, int64_t n) {
  s.dims[axis] = n;
  return s;
}

// Why the pair (forward f, backward b) cannot run in chunks; empty when it can.
std::string why_not(const Graph& g, const Node& f, const Node& b, const ValueReaders& rd) {
  if (f.attr_i("layout", 0) != 0) return "layout 1 (batch-major): its time steps are not contiguous";
  const std::string dir = f.attr_s("direction", "forward");
  if (dir != "forward") return fmt::format("direction {}: only forward layers run in chunks", dir);
  if (!f.input(4).empty()) return "it has sequence_lens";
  const std::string& S = f.outputs.back();
  if (auto it = rd.find(S); it == rd.end() || it->second.size() != 1) return "its saved states have other readers";
  if (b.input(0) != f.input(0) || b.input(1) != f.input(1) || b.input(2) != f.input(2))
    return "its backward reads other X, W or R than its forward";
  auto x = static_shape(g, f.input(0));
  if (!x || x->rank() != 3) return "X has no static shape of rank 3";
  for (const std::string* v : {&f.outputs[0], &f.outputs.back(), &f.inputs[2], &b.input(4)})
    if (!v->empty() && !static_shape(g, *v)) return fmt::format("'{}' has no static shape", *v);
  for (size_t k = 1; k < 4 && k < b.outputs.size(); ++k)
    if (!b.outputs[k].empty() && !static_shape(g, b.outputs[k]))
      return fmt::format("'{}' has no static shape", b.outputs[k]);
  return "";
}

// The nodes replacing forward f and its backward b, in `sizes` chunks of steps.
std::vector<Node> chunk_pair(Graph& g, const Node& f, const Node& b, const std::vector<int64_t>& sizes) {
  std::vector<Node> out;
  const bool lstm = f.op_type == "LSTMTrain";
  const size_t C = sizes.size();
  const Shape x = static_shape(g, f.input(0)).value();
  const int64_t B = x[1];
  const Shape saved = static_shape(g, f.outputs.back()).value();  // [1, T B, G + 2H]
  const Shape state{1, B, static_shape(g, f.input(2)).value()[2]};  // [D, B, H]: R is [D, G, H]
  auto attrs = f.attrs;
  attrs.erase(kTimeChunksAttr);
  auto battrs = b.attrs;
  battrs.erase(kTimeChunksAttr);
  auto fused_node = [&](const Node& like, const std::string& base, const std::string& op, std::vector<std::string> in,
                        std::vector<std::string> outs, std::map<std::string, AttrValue> a = {}) {
    Node n = make_node(g, base, op, std::move(in), std::move(outs), std::move(a));
    n.domain = kFusedDomain;
    place_like(n, like);
    return n;
  };
  auto fresh = [&](const std::string& base, const Shape& s) {
    const std::string v = g.unique_name(base);
    g.values[v] = ValueInfo{v, DType::f32, ValueShape(s)};
    return v;
  };
  const std::string sizes_c = sizes_constant(g, f.name + "/time_chunks", sizes);

  // X in chunks, read by both passes.
  std::vector<std::string> xs;
  for (size_t i = 0; i < C; ++i) xs.push_back(fresh(f.input(0) + "/t" + std::to_string(i), with_axis(x, 0, sizes[i])));
  out.push_back(fused_node(f, f.name + "/split_x", "Split", {f.input(0), sizes_c}, xs, {{"axis", int64_t(0)}}));

  // The forward, chunk after chunk, each starting from the states the one before ended with.
  const std::string& Y = f.outputs[0];
  const auto yshape = static_shape(g, Y);
  std::vector<std::string> ys, ss;
  std::string h_in = f.input(5), c_in = lstm ? f.input(6) : "";
  for (size_t i = 0; i < C; ++i) {
    const std::string tag = "/t" + std::to_string(i);
    const bool last = i + 1 == C;
    std::vector<std::string> o;
    o.push_back(Y.empty() ? "" : fresh(Y + tag, with_axis(yshape.value(), 0, sizes[i])));
    o.push_back(last ? f.outputs[1] : fresh(f.name + tag + "/Y_h", state));
    if (lstm) o.push_back(last ? f.outputs[2] : fresh(f.name + tag + "/Y_c", state));
    o.push_back(fresh(f.outputs.back() + tag, Shape{1, sizes[i] * B, saved[2]}));
    std::vector<std::string> in{xs[i], f.input(1), f.input(2), f.input(3), "", h_in};
    if (lstm) in.push_back(c_in);
    out.push_back(fused_node(f, f.name + tag, f.op_type, in, o, attrs));
    if (!o[0].empty()) ys.push_back(o[0]);
    h_in = o[1];
    if (lstm) c_in = o[2];
    ss.push_back(o.back());
  }
  if (!Y.empty()) out.push_back(fused_node(f, f.name + "/concat_y", "Concat", ys, {Y}, {{"axis", int64_t(0)}}));

  // The backward, from the last chunk to the first, each carrying the state gradients to the one before.
  const std::string& dY = b.input(4);
  std::vector<std::string> dys;
  if (!dY.empty()) {
    const Shape dys_shape = static_shape(g, dY).value();
    for (size_t i = 0; i < C; ++i)
      dys.push_back(fresh(dY + "/t" + std::to_string(i), with_axis(dys_shape, 0, sizes[i])));
    out.push_back(fused_node(b, b.name + "/split_dy", "Split", {dY, sizes_c}, dys, {{"axis", int64_t(0)}}));
  }
  const size_t nout = lstm ? 6 : 5;
  std::vector<std::string> wanted(nout);
  for (size_t k = 0; k < nout && k < b.outputs.size(); ++k) wanted[k] = b.outputs[k];
  std::vector<std::vector<std::string>> parts(4);  // dX, dW, dR, dB per chunk (chunk order)
  for (auto& p : parts) p.resize(C);
  std::string dh = b.input(5), dc = lstm ? b.input(6) : "";
  for (size_t j = C; j-- > 0;) {
    const std::string tag = "/t" + std::to_string(j);
    std::vector<std::string> o(nout);
    for (size_t k = 0; k < 4; ++k)
      if (!wanted[k].empty()) {
        const Shape s = k == 0 ? with_axis(x, 0, sizes[j]) : static_shape(g, wanted[k]).value();
        o[k] = parts[k][j] = fresh(wanted[k] + tag, s);
      }
    o[4] = j == 0 ? wanted[4] : fresh(b.name + tag + "/dh", state);
    if (lstm) o[5] = j == 0 ? wanted[5] : fresh(b.name + tag + "/dc", state);
    std::vector<std::string> in{xs[j], b.input(1), b.input(2), ss[j], dys.empty() ? "" : dys[j], dh};
    if (lstm) in.push_back(dc);
    out.push_back(fused_node(b, b.name + tag, "RNNGrad", in, o, battrs));
    dh = o[4];
    if (lstm) dc = o[5];
  }
  if (!wanted[0].empty())
    out.push_back(fused_node(b, b.name + "/concat_dx", "Concat", parts[0], {wanted[0]}, {{"axis", int64_t(0)}}));
  static const char* kWhat[] = {"dX", "dW", "dR", "dB"};
  for (size_t k = 1; k < 4; ++k)
    if (!wanted[k].empty())
      out.push_back(fused_node(b, b.name + "/sum_" + kWhat[k], "Sum", parts[k], {wanted[k]}));
  return out;
}

// The axis-0 sizes a Split node cuts into (its constant split input); empty when not known or not axis 0.
std::vector<int64_t> split_sizes(const Graph& g, const Node& n) {
  if (n.op_type != "Split" || n.attr_i("axis", 0) != 0 || n.input(1).empty() || !g.is_constant(n.input(1))) return {};
  return to_ints(g.initializers.at(n.input(1)));
}

// Whether `n` keeps the rows along axis 0 as they are (a view of each row: Reshape, Squeeze, Unsqueeze or Identity
// whose input and output have the same static extent T > 1 along axis 0).
bool keeps_rows(const Graph& g, const Node& n) {
  static const std::set<std::string> views = {"Reshape", "Squeeze", "Unsqueeze", "Identity"};
  if (!views.count(n.op_type) || (!n.domain.empty() && n.domain != kFusedDomain) || n.outputs.size() != 1) return false;
  auto in = static_shape(g, n.input(0)), o = static_shape(g, n.outputs[0]);
  return in && o && in->rank() >= 1 && o->rank() >= 1 && (*in)[0] == (*o)[0] && (*in)[0] > 1;
}

// Split (axis 0) of [a row-keeping view of] a Concat (axis 0) of parts with the Split's sizes: each Split output
// becomes its part [viewed the same way], so whoever reads part k waits for part k's producer alone. Returns how
// many Splits went.
size_t split_of_concat(Graph& g, const std::set<std::string>& split_names) {
  size_t count = 0;
  auto pr = g.producers();
  std::set<size_t> drop;
  std::vector<Node> added;
  std::map<std::string, std::string> rename;  // a Split output -> the part that replaces it
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& sp = g.nodes[i];
    if (!split_names.count(sp.name)) continue;
    const auto sizes = split_sizes(g, sp);
    if (sizes.empty() || sizes.size() != sp.outputs.size()) continue;
    auto p = pr.find(sp.input(0));
    if (p == pr.end()) continue;
    const Node* view = nullptr;
    const Node* cat = &g.nodes[p->second];
    if (keeps_rows(g, *cat)) {
      view = cat;
      auto q = pr.find(view->input(0));
      if (q == pr.end()) continue;
      cat = &g.nodes[q->second];
    }
    if (cat->op_type != "Concat" || cat->attr_i("axis", 0) != 0 || cat->inputs.size() != sizes.size()) continue;
    bool match = true;
    for (size_t k = 0; k < sizes.size() && match; ++k) {
      auto s = static_shape(g, cat->inputs[k]);
      match = s && s->rank() >= 1 && (*s)[0] == sizes[k];
    }
    if (!match) continue;
    const Shape vs = view ? static_shape(g, view->outputs[0]).value() : Shape{};
    for (size_t k = 0; k < sizes.size(); ++k) {
      if (!view) {
        rename[sp.outputs[k]] = cat->inputs[k];
        continue;
      }
      const Shape s = with_axis(vs, 0, sizes[k]);
      Node r = make_node(g, sp.name + "/part" + std::to_string(k), "Reshape",
                         {cat->inputs[k], sizes_constant(g, sp.outputs[k] + "/shape", s.dims)}, {sp.outputs[k]});
      r.domain = kFusedDomain;
      place_like(r, sp);
      added.push_back(std::move(r));
    }
    drop.insert(i);
    ++count;
  }
  if (!count) return 0;
  std::set<std::string> outputs;
  for (auto& o : g.outputs) outputs.insert(o.name);
  for (auto& [from, to] : rename)
    if (outputs.count(from)) {  // a graph output keeps its name: an Identity writes it
      Node n = make_node(g, from + "/part", "Identity", {to}, {from});
      added.push_back(std::move(n));
    }
  erase_nodes(g, drop);
  for (auto& n : g.nodes)
    for (auto& in : n.inputs)
      if (auto it = rename.find(in); it != rename.end()) in = it->second;
  for (auto& n : added) g.nodes.push_back(std::move(n));
  return count;
}

}  // namespace

std::vector<int64_t> time_chunk_sizes(int64_t steps, int64_t chunks) {
  chunks = std::clamp<int64_t>(chunks, 1, std::max<int64_t>(steps, 1));
  std::vector<int64_t> s(size_t(chunks), steps / chunks);
  for (int64_t i = 0; i < steps % chunks; ++i) ++s[size_t(i)];
  return s;
}

size_t chunk_rnn_training(Graph& g) {
  bool any = false;
  for (auto& n : g.nodes) any = any || (is_rnn_grad(n) && n.attr_i(kTimeChunksAttr, 1) > 1);
  if (!any) return 0;
  auto rd = value_readers(g);
  auto pr = g.producers();
  std::set<size_t> drop;
  std::vector<Node> added;
  std::set<std::string> splits;
  size_t pairs = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& b = g.nodes[i];
    const int64_t chunks = is_rnn_grad(b) ? b.attr_i(kTimeChunksAttr, 1) : 1;
    if (chunks < 2) continue;
    auto p = pr.find(b.input(3));
    if (p == pr.end() || !is_train_forward(g.nodes[p->second])) {
      log::info("train: {} runs whole in time: its saved states come from no LSTMTrain / GRUTrain", b.describe());
      continue;
    }
    const Node& f = g.nodes[p->second];
    if (auto why = why_not(g, f, b, rd); !why.empty()) {
      log::info("train: {} runs whole in time, not in {} chunks: {}", f.describe(), chunks, why);
      continue;
    }
    const auto sizes = time_chunk_sizes(static_shape(g, f.input(0)).value()[0], chunks);
    if (sizes.size() < 2) continue;
    for (auto& n : chunk_pair(g, f, b, sizes)) {
      if (n.op_type == "Split") splits.insert(n.name);
      added.push_back(std::move(n));
    }
    drop.insert(i);
    drop.insert(p->second);
    ++pairs;
    log::debug("train: {} and its backward in {} time chunks", f.describe(), sizes.size());
  }
  if (!pairs) return 0;
  erase_nodes(g, drop);
  for (auto& n : added) g.nodes.push_back(std::move(n));
  g.sort();
  const size_t joined = split_of_concat(g, splits);
  log::debug("train: {} recurrent layer(s) in time chunks, {} chunk boundary(ies) passed between layers", pairs, joined);
  return pairs + joined;
}

namespace {
struct Register {
  Register() { register_fusion_pass("rnn-time-chunks", chunk_rnn_training, FusionStage::typed); }
} const kRegister;
}  // namespace

}  // namespace cldl::graph
