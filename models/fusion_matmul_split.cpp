// Typed fusion pass "matmul-split": a MatMul by a constant 2-D B whose result is only cut into column
// ranges - by one Split of its last axis or by Slices of it (step 1) - becomes one MatMul per range, B's
// columns (and the per-column bias's) cut at plan time. That is the packed Q/K/V in-projection of attention
// as exporters write it (torchvision's MultiheadAttention: Slices; a qkv Linear split in three: Split): each
// of Q, K and V then comes out of its GEMM contiguous, where the cut of the packed result was a strided copy
// kernel per part (a Slice of the last axis is no view). The bias may be the GEMM epilogue's (_cldl_bias) or
// an Add of a constant [N] / [1, ..., N] that is the MatMul's only reader; an activation fused into the
// MatMul goes with every part. Ranges must not overlap (each column is computed once at most); columns no
// part reads are not computed. Anything else is left as it is.
#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "models/op_registry.hpp"
#include "models/passes.hpp"

namespace cldl::graph {
namespace {

struct Part {
  int64_t start, width;
  std::string out;  // the value the part's MatMul writes (the Slice's / Split's output)
};

const HostTensor* constant(const Graph& g, const Node& n, size_t i) {
  if (i >= n.inputs.size() || n.inputs[i].empty()) return nullptr;
  auto it = g.initializers.find(n.inputs[i]);
  return it == g.initializers.end() ? nullptr : &it->second;
}

// The column range a Slice of the last axis (rank r, N columns) keeps, its width from the inferred shape.
std::optional<Part> slice_part(const Graph& g, const Node& s, int64_t r, int64_t N, const Shape& out) {
  std::vector<int64_t> starts, axes{r - 1}, steps{1};
  if (s.opset < 10) {
    if (!s.has("starts")) return {};
    starts = s.attr_ints("starts");
    if (s.has("axes")) axes = s.attr_ints("axes");
  } else {
    const HostTensor *st = constant(g, s, 1), *ax = constant(g, s, 3), *sp = constant(g, s, 4);
    if (!st || (s.input_count() > 3 && !s.input(3).empty() && !ax) || (s.input_count() > 4 && !s.input(4).empty() && !sp))
      return {};
    starts = to_ints(*st);
    if (ax) axes = to_ints(*ax);
    if (sp) steps = to_ints(*sp);
  }
  if (starts.size() != 1 || axes.size() != 1 || steps.size() != 1 || steps[0] != 1) return {};
  if (axes[0] != -1 && axes[0] != r - 1) return {};
  const int64_t start = std::clamp<int64_t>(starts[0] < 0 ? starts[0] + N : starts[0], 0, N);
  const int64_t width = out.rank() == size_t(r) ? out[size_t(r - 1)] : -1;
  if (width <= 0 || start + width > N) return {};
  return Part{start, width, s.outputs[0]};
}

// Columns [c0, c0 + w) of the row-major [rows, N] f32 tensor `t`, as [rows, w] (a [N] vector: rows 1).
HostTensor columns(const HostTensor& t, int64_t rows, int64_t N, int64_t c0, int64_t w, Shape shape) {
  HostTensor r(DType::f32, std::move(shape));
  const float* src = t.as<float>();
  float* dst = r.as<float>();
  for (int64_t i = 0; i < rows; ++i) std::memcpy(dst + i * w, src + i * N + c0, size_t(w) * sizeof(float));
  return r;
}

size_t split_sliced_matmuls(Graph& g) {
  if (!has_op(g, {"MatMul"}) || !has_op(g, {"Slice", "Split"})) return 0;
  auto rd = value_readers(g);
  auto shape = [&](const std::string& v) -> std::optional<Shape> {
    auto it = g.values.find(v);
    if (it == g.values.end() || !it->second.shape.known || !it->second.shape.is_static()) return std::nullopt;
    return it->second.shape.to_shape();
  };
  auto readers = [&](const std::string& v) -> const std::vector<int>& {
    static const std::vector<int> none;
    auto it = rd.find(v);
    return it == rd.end() ? none : it->second;
  };
  std::set<size_t> drop;
  std::vector<Node> added;
  size_t rewrites = 0;
  const size_t count = g.nodes.size();
  for (size_t i = 0; i < count; ++i) {
    const Node& mm = g.nodes[i];
    if (mm.op_type != "MatMul" || !mm.domain.empty() || mm.input_count() < 2 || drop.count(i)) continue;
    const bool epilogue_bias = mm.has("_cldl_bias");
    const HostTensor* b = constant(g, mm, 1);
    if (!b || b->dtype() != DType::f32 || b->shape().rank() != 2 || mm.input_count() != (epilogue_bias ? 3u : 2u))
      continue;
    const int64_t K = b->shape()[0], N = b->shape()[1];
    const HostTensor* bias = epilogue_bias ? constant(g, mm, 2) : nullptr;
    if (epilogue_bias && (!bias || bias->dtype() != DType::f32 || bias->numel() != N)) continue;
    auto ys = shape(mm.outputs[0]);
    if (!ys || ys->rank() < 2 || (*ys)[ys->rank() - 1] != N) continue;
    const int64_t r = int64_t(ys->rank());
    // The value that is cut: the MatMul's, or that of an Add of a constant per-column bias reading it alone.
    std::string cut = mm.outputs[0];
    std::optional<size_t> add;
    if (!epilogue_bias && readers(cut).size() == 1 && readers(cut)[0] >= 0) {
      const Node& a = g.nodes[size_t(readers(cut)[0])];
      if (a.op_type == "Add" && a.domain.empty() && a.input_count() == 2 && a.input(0) != a.input(1)) {
        const size_t side = a.input(0) == cut ? 1 : 0;
        const HostTensor* c = constant(g, a, side);
        auto as = shape(a.outputs[0]);
        if (c && c->dtype() == DType::f32 && c->numel() == N && c->shape().rank() >= 1 &&
            c->shape()[c->shape().rank() - 1] == N && int64_t(c->shape().rank()) <= r && as && *as == *ys) {
          bias = c;
          add = size_t(readers(cut)[0]);
          cut = a.outputs[0];
        }
      }
    }
    // Its readers: one Split of the last axis, or Slices of the last axis only.
    const auto& rs = readers(cut);
    if (rs.empty() || std::any_of(rs.begin(), rs.end(), [&](int k) { return k < 0 || drop.count(size_t(k)); }))
      continue;
    std::vector<Part> parts;
    bool ok = true;
    const Node& first = g.nodes[size_t(rs[0])];
    if (rs.size() == 1 && first.op_type == "Split" && first.domain.empty()) {
      const int64_t axis = first.attr_i("axis", 0);
      ok = axis == -1 || axis == r - 1;
      int64_t start = 0;
      for (const auto& o : first.outputs) {
        auto os = o.empty() ? std::nullopt : shape(o);
        if (!os || os->rank() != size_t(r)) {
          ok = false;
          break;
        }
        const int64_t w = (*os)[size_t(r - 1)];
        if (w > 0 && !readers(o).empty()) parts.push_back({start, w, o});
        start += w;
      }
      ok = ok && start == N;
    } else {
      for (int k : rs) {
        const Node& s = g.nodes[size_t(k)];
        auto os = s.op_type == "Slice" && s.domain.empty() && s.outputs.size() == 1 ? shape(s.outputs[0]) : std::nullopt;
        auto p = os ? slice_part(g, s, r, N, *os) : std::nullopt;
        if (!p) {
          ok = false;
          break;
        }
        parts.push_back(*p);
      }
    }
    if (!ok || parts.empty()) continue;
    std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.start < b.start; });
    for (size_t p = 1; p < parts.size() && ok; ++p) ok = parts[p - 1].start + parts[p - 1].width <= parts[p].start;
    if (!ok) continue;
    for (size_t p = 0; p < parts.size(); ++p) {
      const Part& part = parts[p];
      Node n = mm;
      n.name = g.unique_name(mm.name + "_cols" + std::to_string(part.start));
      const std::string wb = g.unique_name(mm.input(1) + "_cols" + std::to_string(part.start));
      g.initializers[wb] = columns(*b, K, N, part.start, part.width, Shape{K, part.width});
      g.values[wb] = ValueInfo{wb, DType::f32, Shape{K, part.width}};
      n.inputs = {mm.input(0), wb};
      if (bias) {
        const std::string bb = g.unique_name((epilogue_bias ? mm.input(2) : cut) + "_bias" + std::to_string(part.start));
        g.initializers[bb] = columns(*bias, 1, N, part.start, part.width, Shape{part.width});
        g.values[bb] = ValueInfo{bb, DType::f32, Shape{part.width}};
        n.inputs.push_back(bb);
        n.attrs["_cldl_bias"] = int64_t(1);
      }
      n.outputs = {part.out};
      added.push_back(std::move(n));
    }
    drop.insert(i);
    if (add) drop.insert(*add);
    for (int k : rs) drop.insert(size_t(k));
    ++rewrites;
  }
  erase_nodes(g, drop);
  for (auto& n : added) g.nodes.push_back(std::move(n));
  return rewrites;
}

const bool kRegistered = (register_fusion_pass("matmul-split", split_sliced_matmuls, FusionStage::typed), true);

}  // namespace
}  // namespace cldl::graph
