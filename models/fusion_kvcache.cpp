// KV-cache row scatter (typed pass "kv-cache-scatter"): the cache update as PyTorch exports
// `cache.index_copy`-style writes of T new rows at position `pos` into a [B, L, D...] cache,
//   rows = Gather(new [B, T, D...], idx [L], axis 1)      idx[j] = clamp(j - pos, 0, T - 1)
//   out  = Where(cond [L, 1...], rows, cache)             cond[j] = pos <= j < pos + T
// (two kernels over the whole cache per cache and token) becomes one TensorScatter node (layers/llm.hpp:
// linear mode, write_indices = pos for every batch entry; rows past the cache are dropped, as the Where
// drops them). When the caller binds the cache input and output to one buffer (Generator), TensorScatter
// writes the T rows alone.
//
// The index and the condition are recognised by what they compute, not by the ops that compute them: both
// must depend on no value but one int64 graph input `pos` of one element and constants, through ops of a
// small integer evaluator here (elementwise arithmetic, comparisons, logic, Unsqueeze, Reshape...), and must
// equal the formulas above for every pos from -T - 2 to L + 2 and a few far outside. A different export
// (an off-by-one, a clamp of its own, a mask over something else) leaves the Gather and Where alone.
#include <algorithm>
#include <optional>
#include <set>
#include <tuple>

#include "models/op_registry.hpp"
#include "models/passes.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {
namespace {

// An integer (or bool) tensor of the evaluator, row-major.
struct IntTensor {
  std::vector<int64_t> dims;
  std::vector<int64_t> v;
};

std::optional<IntTensor> from_host(const HostTensor& t) {
  if (t.dtype() != DType::i64 && t.dtype() != DType::i32 && t.dtype() != DType::boolean) return std::nullopt;
  IntTensor r;
  r.dims = t.shape().dims;
  r.v = to_ints(t);
  return r;
}

// Numpy broadcasting of two operands.
std::optional<IntTensor> broadcast(const IntTensor& a, const IntTensor& b, int64_t (*f)(int64_t, int64_t)) {
  const size_t r = std::max(a.dims.size(), b.dims.size());
  std::vector<int64_t> da(r, 1), db(r, 1), d(r);
  std::copy(a.dims.begin(), a.dims.end(), da.begin() + long(r - a.dims.size()));
  std::copy(b.dims.begin(), b.dims.end(), db.begin() + long(r - b.dims.size()));
  int64_t n = 1;
  for (size_t i = 0; i < r; ++i) {
    if (da[i] != db[i] && da[i] != 1 && db[i] != 1) return std::nullopt;
    d[i] = da[i] == 1 ? db[i] : da[i];
    n *= d[i];
  }
  if (n > (int64_t(1) << 20)) return std::nullopt;
  IntTensor out{d, std::vector<int64_t>(size_t(n))};
  std::vector<int64_t> idx(r, 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t ia = 0, ib = 0;
    for (size_t i = 0; i < r; ++i) {
      ia = ia * da[i] + (da[i] == 1 ? 0 : idx[i]);
      ib = ib * db[i] + (db[i] == 1 ? 0 : idx[i]);
    }
    out.v[size_t(e)] = f(a.v[size_t(ia)], b.v[size_t(ib)]);
    for (size_t i = r; i-- > 0;)
      if (++idx[i] < d[i]) break;
      else idx[i] = 0;
  }
  return out;
}

// The values of `v` for one value of `pos`, or nullopt where some node on the way is outside the
// evaluator (then the pattern does not match).
class Evaluator {
 public:
  Evaluator(const Graph& g, const std::map<std::string, size_t>& producers, std::string pos)
      : g_(g), pr_(producers), pos_(std::move(pos)) {}

  // Values of one pos share their common nodes: set_pos() starts anew.
  void set_pos(int64_t pos) {
    cache_.clear();
    pos_value_ = pos;
  }
  std::optional<IntTensor> eval(const std::string& v) { return value(v, 0); }

 private:
  std::optional<IntTensor> value(const std::string& v, int depth) {
    if (v == pos_) return IntTensor{{1}, {pos_value_}};
    if (auto c = cache_.find(v); c != cache_.end()) return c->second;
    std::optional<IntTensor> r;
    if (auto it = g_.initializers.find(v); it != g_.initializers.end()) {
      r = from_host(it->second);
    } else if (auto p = pr_.find(v); p != pr_.end() && depth < 32) {
      r = node(g_.nodes[p->second], depth + 1);
    }
    cache_[v] = r;
    return r;
  }

  std::optional<IntTensor> node(const Node& n, int depth) {
    if (!n.domain.empty() || n.outputs.size() != 1) return std::nullopt;
    std::vector<IntTensor> in;
    for (auto& i : n.inputs) {
      if (i.empty()) return std::nullopt;
      auto t = value(i, depth);
      if (!t) return std::nullopt;
      in.push_back(std::move(*t));
    }
    using F = int64_t (*)(int64_t, int64_t);
    static const std::map<std::string, F> binary{
        {"Add", [](int64_t a, int64_t b) { return a + b; }},
        {"Sub", [](int64_t a, int64_t b) { return a - b; }},
        {"Mul", [](int64_t a, int64_t b) { return a * b; }},
        {"Min", [](int64_t a, int64_t b) { return std::min(a, b); }},
        {"Max", [](int64_t a, int64_t b) { return std::max(a, b); }},
        {"Less", [](int64_t a, int64_t b) { return int64_t(a < b); }},
        {"LessOrEqual", [](int64_t a, int64_t b) { return int64_t(a <= b); }},
        {"Greater", [](int64_t a, int64_t b) { return int64_t(a > b); }},
        {"GreaterOrEqual", [](int64_t a, int64_t b) { return int64_t(a >= b); }},
        {"Equal", [](int64_t a, int64_t b) { return int64_t(a == b); }},
        {"And", [](int64_t a, int64_t b) { return int64_t(a && b); }},
        {"Or", [](int64_t a, int64_t b) { return int64_t(a || b); }},
    };
    const std::string& op = n.op_type;
    if (auto f = binary.find(op); f != binary.end()) {
      if (in.size() != 2) return std::nullopt;
      return broadcast(in[0], in[1], f->second);
    }
    if (op == "Not" && in.size() == 1) {
      for (auto& x : in[0].v) x = !x;
      return in[0];
    }
    if ((op == "Identity" || op == "Cast") && !in.empty()) {
      if (op == "Cast") {  // to an integer or bool type only (a float cast could round)
        const int64_t to = n.attr_i("to", 0);
        if (to != 6 && to != 7 && to != 9) return std::nullopt;  // int32, int64, bool
        if (to == 9)
          for (auto& x : in[0].v) x = x != 0;
      }
      return in[0];
    }
    if (op == "Unsqueeze" || op == "Squeeze" || op == "Reshape" || op == "Flatten") {
      // The output's static shape from inference; the values keep their order.
      const ValueInfo* info = g_.info(n.outputs[0]);
      if (in.empty() || !info || !info->shape.is_static()) return std::nullopt;
      Shape s = info->shape.to_shape();
      if (s.numel() != int64_t(in[0].v.size())) return std::nullopt;
      in[0].dims = s.dims;
      return in[0];
    }
    return std::nullopt;
  }

  const Graph& g_;
  const std::map<std::string, size_t>& pr_;
  std::string pos_;
  int64_t pos_value_ = 0;
  std::map<std::string, std::optional<IntTensor>> cache_;
};

// The graph inputs that `v` depends on (through any node). An index or a mask of a position is a handful
// of nodes: past 256 values the walk stops and reports a dependence on everything (no match).
constexpr size_t kMaxWalk = 256;
void inputs_of(const Graph& g, const std::map<std::string, size_t>& pr, const std::string& v,
               std::set<std::string>& seen, std::set<std::string>& inputs) {
  if (seen.size() > kMaxWalk) {
    inputs.insert("");  // too far: more than one input, whatever the graph holds
    return;
  }
  if (!seen.insert(v).second || g.initializers.count(v)) return;
  if (g.is_input(v)) {
    inputs.insert(v);
    return;
  }
  auto p = pr.find(v);
  if (p == pr.end()) return;
  for (auto& i : g.nodes[p->second].inputs)
    if (!i.empty()) inputs_of(g, pr, i, seen, inputs);
}

std::optional<Shape> static_shape(const Graph& g, const std::string& v) {
  const ValueInfo* info = g.info(v);
  if (!info || !info->shape.is_static()) return std::nullopt;
  return info->shape.to_shape();
}

// Whether cond and idx compute the row scatter of T rows into L positions for every tested pos.
bool computes_row_scatter(Evaluator& ev, const std::string& cond, const std::string& idx, int64_t L, int64_t T) {
  std::vector<int64_t> tries;
  for (int64_t p = -T - 2; p <= L + 2; ++p) tries.push_back(p);
  for (int64_t p : {int64_t(-1000003), int64_t(1000003), int64_t(1) << 40, -(int64_t(1) << 40)}) tries.push_back(p);
  for (int64_t pos : tries) {
    ev.set_pos(pos);
    auto c = ev.eval(cond);
    auto x = ev.eval(idx);
    if (!c || !x || int64_t(c->v.size()) != L || int64_t(x->v.size()) != L) return false;
    for (int64_t j = 0; j < L; ++j) {
      const bool in = pos <= j && j < pos + T;
      if (bool(c->v[size_t(j)]) != in) return false;
      if (in && x->v[size_t(j)] != j - pos) return false;
    }
  }
  return true;
}

size_t fuse_kv_cache_scatter(Graph& g) {
  if (!has_op(g, {"Where"}) || !has_op(g, {"Gather"})) return 0;
  auto rd = value_readers(g);
  auto pr = g.producers();
  std::set<size_t> drop;
  size_t count = 0;
  bool expanded = false;
  std::map<std::tuple<std::string, std::string, int64_t, int64_t>, bool> checked;
  const size_t n_nodes = g.nodes.size();
  for (size_t i = 0; i < n_nodes; ++i) {
    Node& where = g.nodes[i];
    if (where.op_type != "Where" || !where.domain.empty() || where.input_count() != 3 || where.outputs.size() != 1)
      continue;
    const std::string cond = where.input(0), rows = where.input(1), cache = where.input(2), out = where.outputs[0];
    auto cs = static_shape(g, cache), os = static_shape(g, out), rs = static_shape(g, rows), ks = static_shape(g, cond);
    const ValueInfo* ci = g.info(cache);
    if (!cs || !os || !rs || !ks || !ci || *cs != *os || *rs != *cs || cs->rank() < 3) continue;
    const int64_t L = (*cs)[1];
    // The condition varies along axis 1 of the cache only: [L, 1...] or [1, L, 1...] broadcast against it.
    if (ks->numel() != L || ks->rank() > cs->rank() || ks->rank() + 1 < cs->rank()) continue;
    if ((*ks)[size_t(1 - (cs->rank() - ks->rank()))] != L && L != 1) continue;
    auto gp = pr.find(rows);
    if (gp == pr.end() || drop.count(gp->second) || rd[rows].size() != 1) continue;
    const Node& gather = g.nodes[gp->second];
    if (gather.op_type != "Gather" || !gather.domain.empty() || gather.input_count() != 2 ||
        gather.attr_i("axis", 0) != 1)
      continue;
    const std::string src = gather.input(0), idx = gather.input(1);
    auto ss = static_shape(g, src), is = static_shape(g, idx);
    const ValueInfo* si = g.info(src);
    if (!ss || !is || !si || si->dtype != ci->dtype || ss->rank() != cs->rank() || is->rank() != 1 ||
        (*is)[0] != L)
      continue;
    const int64_t T = (*ss)[1];
    bool same = T >= 1 && T <= L;
    for (size_t d = 0; same && d < cs->rank(); ++d) same = d == 1 || (*ss)[d] == (*cs)[d];
    if (!same) continue;
    // Both depend on one int64 graph input of one element (the position) and constants.
    std::set<std::string> seen, inputs;
    inputs_of(g, pr, cond, seen, inputs);
    inputs_of(g, pr, idx, seen, inputs);
    if (inputs.size() != 1 || inputs.count("")) continue;
    const std::string pos = *inputs.begin();
    auto ps = static_shape(g, pos);
    if (!ps || ps->numel() != 1 || g.info(pos)->dtype != DType::i64) continue;
    // The caches of one model share their condition and index: each pair is checked once.
    const auto key = std::make_tuple(cond, idx, L, T);
    auto known = checked.find(key);
    if (known == checked.end()) {
      Evaluator ev(g, pr, pos);
      known = checked.emplace(key, computes_row_scatter(ev, cond, idx, L, T)).first;
    }
    if (!known->second) {
      log::debug("kv-cache-scatter: {} looks like a cache update but its condition / index are not a row write at "
                 "'{}': left as is",
                 where.describe(), pos);
      continue;
    }
    const int64_t B = (*cs)[0];
    // Copies: the push_back below may move the nodes.
    const std::string wname = where.name, gname = gather.name;
    std::string indices = pos;
    if (ps->rank() != 1 || B != 1) {  // write_indices is [B]: the same position for every batch entry
      const std::string shape = g.unique_name(wname + "_kv_batch");
      g.initializers[shape] = HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{B});
      g.values[shape] = ValueInfo{shape, DType::i64, ValueShape(Shape{1})};
      indices = g.unique_name(wname + "_kv_indices");
      Node expand;
      expand.name = indices;
      expand.op_type = "Expand";
      expand.opset = 13;
      expand.inputs = {pos, shape};
      expand.outputs = {indices};
      g.values[indices] = ValueInfo{indices, DType::i64, ValueShape(Shape{B})};
      g.nodes.push_back(std::move(expand));  // put before its reader by the sort below
      expanded = true;
    }
    Node ts;
    ts.name = wname.empty() ? g.unique_name("kv_cache_scatter") : wname + "/kv_scatter";
    ts.op_type = "TensorScatter";
    ts.domain = kFusedDomain;
    ts.inputs = {cache, src, indices};
    ts.outputs = {out};
    ts.attrs["axis"] = int64_t(1);
    ts.attrs["mode"] = std::string("linear");
    ts.attrs["members"] = std::vector<std::string>{gname, wname};
    drop.insert(gp->second);
    g.nodes[i] = std::move(ts);
    ++count;
  }
  erase_nodes(g, drop);  // the index and condition nodes are left to dead-node removal
  if (expanded) g.sort();
  return count;
}

const bool kRegistered = (register_fusion_pass("kv-cache-scatter", fuse_kv_cache_scatter, FusionStage::typed), true);

}  // namespace
}  // namespace cldl::graph
