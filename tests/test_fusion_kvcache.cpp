// KV-cache row scatter (models/fusion_kvcache.cpp, pass "kv-cache-scatter"): the cache update as PyTorch
// exports it (tiny_gpt: rows = Gather(new, clamp(arange(L) - pos, 0, T - 1), axis 1); out = Where(pos <= j <
// pos + T, rows, cache)) becomes one TensorScatter. Each case checks what the pass made of the graph (so a
// broken pass cannot pass silently), then compares the output with a host reference and with the graph run
// unfused (CLDL_SKIP_PASSES=kv-cache-scatter): odd cache sizes, T = 1 and T > 1, batch 1 and 2, positions 0,
// the middle, the last row, rows past the end (dropped) and a negative position. Graphs that compute
// something else (an off-by-one mask, an index clamped below at 1, a mask on another input) must not match; one
// that computes the same rows another way (the index clamped at T instead of T - 1) must.
#include <cstdlib>

#include "tests/support/graph_util.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;

using test::count_ops;

namespace {

// clamp_at_t: the index clamped at T instead of T - 1 (the same rows where the mask holds: must match);
// index_floor_1: clamped below at 1 (row pos gets fresh row 1: must not match).
enum class Variant { exported, clamp_at_t, mask_off_by_one, index_floor_1, mask_not_from_pos };

struct Dims {
  int64_t B, T, L, D;
};

// The export: cond [L, 1] and idx [L] from pos [1] (int64) and constants.
Graph kv_graph(const Dims& d, Variant v, Value* out_name = nullptr) {
  GraphBuilder b("kv", 17);
  auto fresh = b.input("fresh", DType::f32, Shape{d.B, d.T, d.D});
  auto cache = b.input("cache", DType::f32, Shape{d.B, d.L, d.D});
  auto pos = b.input("pos", DType::i64, Shape{1});
  auto other = b.input("other", DType::i64, Shape{1});
  std::vector<int64_t> ar(size_t(d.L));
  for (int64_t j = 0; j < d.L; ++j) ar[size_t(j)] = j;
  auto arange = b.constant("arange", HostTensor::from<int64_t>(Shape{d.L}, ar));
  auto scalar = [&](const char* n, int64_t x) { return b.constant(n, HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{x})); };
  auto end = b.op1("Add", {pos, scalar("t", v == Variant::mask_off_by_one ? d.T + 1 : d.T)});
  auto lo = b.op1("GreaterOrEqual", {arange, v == Variant::mask_not_from_pos ? other : pos});
  auto hi = b.op1("Less", {arange, end});
  auto cond = b.op1("Unsqueeze", {b.op1("And", {lo, hi}), b.constant("axes", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{1}))});
  auto idx = b.op1("Max", {b.op1("Min", {b.op1("Sub", {arange, pos}), scalar("tm1", v == Variant::clamp_at_t ? d.T : d.T - 1)}),
                           scalar("zero", v == Variant::index_floor_1 ? 1 : 0)});
  auto rows = b.op1("Gather", {fresh, idx}, {{"axis", int64_t(1)}});
  auto out = b.op1("Where", {cond, rows, cache});
  b.output(out);
  if (out_name) *out_name = out;
  return b.build();
}

// out[b, j] = fresh[b, j - pos] where pos <= j < pos + T (and 0 <= j < L), else cache[b, j].
std::vector<float> reference(const Dims& d, const HostTensor& fresh, const HostTensor& cache, int64_t pos) {
  std::vector<float> r(cache.as<float>(), cache.as<float>() + cache.numel());
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < d.T; ++t) {
      const int64_t j = pos + t;
      if (j < 0 || j >= d.L) continue;
      for (int64_t k = 0; k < d.D; ++k) r[size_t((b * d.L + j) * d.D + k)] = fresh.as<float>()[(b * d.T + t) * d.D + k];
    }
  return r;
}

struct Run {
  Graph g;
  HostTensor y;
};

Run prepare_and_run(Graph g, const std::map<std::string, HostTensor>& in, const std::string& out, bool fuse) {
  Run r;
  test::prepare_skipping(g, fuse ? "" : "kv-cache-scatter");
  r.g = g;
  r.y = CompiledModel::compile(test::shared_ctx(), std::move(g))->session()->run(in)[out];
  return r;
}

std::map<std::string, HostTensor> inputs(const Dims& d, int64_t pos, int seed) {
  return {{"fresh", test::random_tensor(Shape{d.B, d.T, d.D}, seed, 2, 3)},
          {"cache", test::random_tensor(Shape{d.B, d.L, d.D}, seed + 1, -1, 1)},
          {"pos", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{pos})},
          {"other", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{pos})}};
}

}  // namespace

TEST_SUITE("fusion_kvcache") {
  TEST_CASE("the exported KV-cache update becomes one TensorScatter: odd sizes, batch 1 and 2, every position") {
    for (Dims d : {Dims{1, 1, 7, 5}, Dims{2, 1, 9, 3}, Dims{1, 3, 11, 6}, Dims{2, 4, 5, 7}, Dims{1, 5, 5, 2}}) {
      for (int64_t pos : {int64_t(0), d.L / 2, d.L - d.T, d.L - 1, d.L, int64_t(-1), -d.T}) {
        INFO("B " << d.B << " T " << d.T << " L " << d.L << " D " << d.D << " pos " << pos);
        const Variant v = d.T > 1 && pos == 0 ? Variant::clamp_at_t : Variant::exported;
        Value out;
        kv_graph(d, v, &out);
        auto in = inputs(d, pos, int(d.L * 10 + d.T));
        Run fused = prepare_and_run(kv_graph(d, v), in, out.name, true);
        REQUIRE(count_ops(fused.g, "TensorScatter") == 1);
        CHECK(count_ops(fused.g, "Where") == 0);
        CHECK(count_ops(fused.g, "Gather") == 0);
        Run plain = prepare_and_run(kv_graph(d, v), in, out.name, false);
        CHECK(count_ops(plain.g, "TensorScatter") == 0);
        auto want = reference(d, in["fresh"], in["cache"], pos);
        REQUIRE(fused.y.shape() == Shape{d.B, d.L, d.D});
        CLDL_CHECK_CLOSE(fused.y.as<float>(), want.data(), want.size(), 0, 0);
        CLDL_CHECK_CLOSE(plain.y.as<float>(), want.data(), want.size(), 0, 0);
      }
    }
  }

  TEST_CASE("updates that are not a row write at pos are left alone") {
    const Dims d{1, 2, 7, 3};
    for (Variant v : {Variant::mask_off_by_one, Variant::index_floor_1, Variant::mask_not_from_pos}) {
      INFO("variant " << int(v));
      Value out;
      kv_graph(d, v, &out);
      auto in = inputs(d, 3, 5);
      Run fused = prepare_and_run(kv_graph(d, v), in, out.name, true);
      CHECK(count_ops(fused.g, "TensorScatter") == 0);
      Run plain = prepare_and_run(kv_graph(d, v), in, out.name, false);
      CLDL_CHECK_CLOSE(fused.y.as<float>(), plain.y.as<float>(), size_t(plain.y.numel()), 0, 0);
    }
  }
}
