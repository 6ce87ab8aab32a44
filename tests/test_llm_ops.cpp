// Language-model ops against tests/reference/llm_ref.cpp: TensorScatter (linear and circular, write positions at
// the end of the cache and wrapping past it, axis other than -2, several dtypes moved bit for bit, absent
// write_indices, a run-time linear index past the end; a separate output and in place), SwiGLU of two inputs (alpha, odd sizes, f16),
// CausalConvWithState (kernel sizes 1, 3, 4, 6 with inputs shorter than the state, bias, past state, SiLU, f16),
// LinearAttention (all four update rules; head dims 1, 3, 17, 64 and one past the private-state limit; T = 1, 5,
// 33; batch 1 and 2; GQA ratios 1, 2, 3; decay per head and per key dim; beta per head and shared; with and
// without past state; f16 activations with an f32 or f16 state) and FlexAttention (GQA, soft cap and -inf mask
// score_mod subgraphs, prob_mod, no modifiers through ONNX Attention and through MatMul / Softmax, f16); state
// carried across calls (prefill + decode steps = one run; empty sequences), and the errors that name the node
// and the argument. A skipped case times LinearAttention's one launch against a step loop.
// Tolerances: TensorScatter exact; SwiGLU and CausalConvWithState 1e-5 relative + 1e-6 absolute (f32) against the
// double references; LinearAttention and FlexAttention 1e-4 + 1e-5 (fp32 sums over d_k per step, T steps; over
// keys); f16 outputs 4e-3 + 1e-3 (one f16 rounding of an fp32 result, and the f16 inputs the reference reads too).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>

#include "layers/llm.hpp"
#include "models/builder.hpp"
#include "models/op_registry.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/llm_ref.hpp"
#include "support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::test;
using graph::GraphBuilder;

namespace {
std::vector<double> dbl(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void check_close(const std::vector<float>& got, const std::vector<double>& want, size_t from, double rtol,
                 double atol) {
  REQUIRE(got.size() + from <= want.size());
  std::vector<float> w(want.begin() + long(from), want.begin() + long(from + got.size()));
  CLDL_CHECK_CLOSE(got.data(), w.data(), got.size(), rtol, atol);
}

// Rounds through f16 (what an f16 input holds).
std::vector<float> through_half(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = graph::half_to_float(graph::float_to_half(v[i]));
  return r;
}
HostTensor half_tensor(const Shape& s, const std::vector<float>& v) {
  HostTensor h(DType::f16, s);
  for (size_t i = 0; i < v.size(); ++i) static_cast<uint16_t*>(h.data())[i] = graph::float_to_half(v[i]);
  return h;
}
std::vector<float> floats_of(const HostTensor& h) {
  auto d = graph::to_doubles(h);
  return {d.begin(), d.end()};
}

// Runs `op` into freshly allocated outputs; waits.
std::vector<Tensor> run2(Op& op, const std::vector<Tensor>& in, const std::vector<std::pair<Shape, DType>>& outs) {
  std::vector<Tensor> y;
  for (auto& [s, t] : outs) y.push_back(ctx().alloc(s, t));
  Tensor ws;
  if (op.workspace_bytes()) ws = ctx().alloc(Shape{int64_t((op.workspace_bytes() + 3) / 4)}, DType::f32);
  auto ec = ctx().exec();
  op.enqueue(in, y, ws.valid() ? &ws : nullptr, ec);
  ctx().finish();
  return y;
}
}  // namespace

TEST_CASE("TensorScatter: linear and circular KV-cache writes against the reference") {
  struct Case {
    Shape cache;
    int64_t axis, S;
    std::vector<int64_t> idx;  // empty: no write_indices input
    bool circular;
  };
  const Case cases[] = {
      {{3, 5, 7, 3}, -2, 2, {0, 5, 3}, false},  // last write ends at the cache end
      {{3, 5, 7, 3}, -2, 3, {6, 5, 0}, true},   // wraps: 6, 0, 1
      {{1, 7, 9}, 1, 1, {6}, false},            // batch 1, decode step at the last position
      {{2, 4, 6, 5}, 1, 4, {}, false},          // axis 1, no indices (zeros), update fills the axis
      {{2, 3, 5}, -1, 5, {2, 4}, true},         // S == L on the last axis, circular: a rotation
      {{2, 3, 4, 2, 3}, 2, 2, {2, 1}, false},   // axis in the middle with inner dims after it
  };
  for (const auto& c : cases) {
    CAPTURE(c.cache.str());
    CAPTURE(c.circular);
    const int64_t r = int64_t(c.cache.rank()), axis = c.axis < 0 ? c.axis + r : c.axis;
    Shape up_s = c.cache;
    up_s[size_t(axis)] = c.S;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < r; ++i)
      if (i < axis)
        outer *= c.cache[size_t(i)];
      else if (i > axis)
        inner *= c.cache[size_t(i)];
    auto cache = random_floats(size_t(c.cache.numel()), 11);
    auto upd = random_floats(size_t(up_s.numel()), 12, 2.0f, 3.0f);
    auto want = ref::tensor_scatter(dbl(cache), dbl(upd), c.cache[0], outer, c.cache[size_t(axis)], c.S, inner, c.idx,
                                    c.circular);
    TensorScatterConfig cfg{c.cache, up_s, DType::f32, c.axis, c.circular, !c.idx.empty()};
    auto op = TensorScatter::create(ctx(), 0, cfg);
    std::vector<Tensor> in{up(cache, c.cache), up(upd, up_s)};
    if (!c.idx.empty()) in.push_back(up(c.idx, Shape{c.cache[0]}));
    auto got = down<float>(run_op(*op, in, c.cache));
    check_close(got, want, 0, 0, 0);
    // In place (past_cache and present_cache one buffer, as Generator binds a state): the rows alone.
    std::vector<Tensor> same{up(cache, c.cache)};
    in[0] = same[0];
    auto ec = ctx().exec();
    op->enqueue(in, same, nullptr, ec);
    ctx().finish();
    check_close(down<float>(same[0]), want, 0, 0, 0);
  }
  SUBCASE("a linear write index known only at run time that runs past the cache writes only the rows that fit") {
    // The spec forbids it (checked at load when the index is known then); at run time nothing outside the
    // cache is touched: the rows at positions 5 (fits) are written, 6 and 7 are not, the rest is the past.
    const Shape cs{1, 2, 6, 3}, us{1, 2, 3, 3};
    auto cache = random_floats(size_t(cs.numel()), 13), upd = random_floats(size_t(us.numel()), 14, 2.0f, 3.0f);
    auto op = TensorScatter::create(ctx(), 0, {cs, us, DType::f32, -2, false, true});
    auto got = down<float>(run_op(*op, {up(cache, cs), up(upd, us), up(std::vector<int64_t>{5}, Shape{1})}, cs));
    std::vector<float> want = cache;
    for (int64_t o = 0; o < 2; ++o)
      for (int64_t i = 0; i < 3; ++i) want[size_t((o * 6 + 5) * 3 + i)] = upd[size_t((o * 3 + 0) * 3 + i)];
    CHECK(got == want);
  }
  SUBCASE("other dtypes move bit for bit") {
    const Shape cs{2, 3, 5, 2}, us{2, 3, 2, 2};
    std::vector<int64_t> idx{3, 4};
    auto c64 = random_ints<int64_t>(size_t(cs.numel()), -1000000, 1000000, 3);
    auto u64 = random_ints<int64_t>(size_t(us.numel()), -1000000, 1000000, 4);
    auto want = ref::tensor_scatter(std::vector<double>(c64.begin(), c64.end()),
                                    std::vector<double>(u64.begin(), u64.end()), 2, 6, 5, 2, 2, idx, true);
    auto op = TensorScatter::create(ctx(), 0, {cs, us, DType::i64, -2, true, true});
    auto got = down<int64_t>(run_op(*op, {up(c64, cs), up(u64, us), up(idx, Shape{2})}, cs, DType::i64));
    for (size_t i = 0; i < got.size(); ++i) CHECK(double(got[i]) == want[i]);
    std::vector<uint8_t> c8(size_t(cs.numel())), u8(size_t(us.numel()));
    for (size_t i = 0; i < c8.size(); ++i) c8[i] = uint8_t(i);
    for (size_t i = 0; i < u8.size(); ++i) u8[i] = uint8_t(200 + i);
    auto want8 = ref::tensor_scatter(std::vector<double>(c8.begin(), c8.end()),
                                     std::vector<double>(u8.begin(), u8.end()), 2, 6, 5, 2, 2, idx, true);
    auto op8 = TensorScatter::create(ctx(), 0, {cs, us, DType::u8, -2, true, true});
    auto got8 = down<uint8_t>(run_op(*op8, {up(c8, cs), up(u8, us), up(idx, Shape{2})}, cs, DType::u8));
    for (size_t i = 0; i < got8.size(); ++i) CHECK(double(got8[i]) == want8[i]);
  }
}

TEST_CASE("SwiGLU of two inputs against the reference (f32, alpha, f16 through a graph)") {
  for (auto [shape, alpha] :
       {std::pair{Shape{3, 37}, 1.0f}, std::pair{Shape{1, 5, 7}, 0.5f}, std::pair{Shape{1}, 1.7f}}) {
    CAPTURE(shape.str());
    auto a = random_floats(size_t(shape.numel()), 21, -6.0f, 6.0f), b = random_floats(size_t(shape.numel()), 22);
    auto op = SwiGluPair::create(ctx(), 0, shape, DType::f32, alpha);
    auto got = down<float>(run_op(*op, {up(a, shape), up(b, shape)}, shape));
    check_close(got, ref::swiglu(dbl(a), dbl(b), alpha), 0, 1e-5, 1e-6);
  }
  SUBCASE("f16") {
    const Shape s{4, 19};
    auto a = through_half(random_floats(76, 23, -4.0f, 4.0f)), b = through_half(random_floats(76, 24));
    GraphBuilder g("swiglu16", 28);
    g.output(g.op1("SwiGLU", {g.input("a", DType::f16, s), g.input("b", DType::f16, s)}), "y");
    auto out = run_graph(g.build(), {{"a", half_tensor(s, a)}, {"b", half_tensor(s, b)}});
    REQUIRE(out.at("y").dtype() == DType::f16);
    check_close(floats_of(out.at("y")), ref::swiglu(dbl(a), dbl(b), 1.0), 0, 4e-3, 1e-3);
  }
}

TEST_CASE("CausalConvWithState against the reference: kernel sizes, short inputs, bias, past state, SiLU") {
  struct Case {
    int64_t B, C, L, K;
    bool bias, past, silu;
  };
  const Case cases[] = {
      {1, 3, 5, 4, false, false, false}, {2, 5, 33, 4, true, true, true}, {1, 1, 1, 4, false, true, false},
      {2, 3, 2, 6, true, true, false},   {1, 7, 5, 1, true, false, true}, {3, 2, 9, 3, false, true, true},
  };
  for (const auto& c : cases) {
    CAPTURE(c.L);
    CAPTURE(c.K);
    CAPTURE(c.past);
    const Shape xs{c.B, c.C, c.L}, ss{c.B, c.C, c.K - 1};
    auto x = random_floats(size_t(xs.numel()), 31, -2.0f, 2.0f), w = random_floats(size_t(c.C * c.K), 32);
    auto bias = c.bias ? random_floats(size_t(c.C), 33) : std::vector<float>{};
    auto past = c.past ? random_floats(size_t(ss.numel()), 34) : std::vector<float>{};
    auto want = ref::causal_conv_with_state(dbl(x), c.B, c.C, c.L, dbl(w), c.K, dbl(bias), dbl(past), c.silu);
    auto op = CausalConvWithState::create(ctx(), 0, {xs, c.K, DType::f32, c.bias, c.past, c.silu});
    std::vector<Tensor> in{up(x, xs), up(w, Shape{c.C, 1, c.K})};
    if (c.bias) in.push_back(up(bias, Shape{c.C}));
    if (c.past) in.push_back(up(past, ss));
    std::vector<std::pair<Shape, DType>> outs{{xs, DType::f32}};
    if (c.K > 1) outs.push_back({ss, DType::f32});
    auto y = run2(*op, in, outs);
    check_close(down<float>(y[0]), want, 0, 1e-5, 1e-6);
    if (c.K > 1) check_close(down<float>(y[1]), want, size_t(xs.numel()), 0, 0);  // a copy: exact
  }
  SUBCASE("f16 through a graph, with past state and SiLU") {
    const Shape xs{2, 3, 7}, ws{3, 1, 4}, ss{2, 3, 3};
    auto x = through_half(random_floats(42, 35, -2.0f, 2.0f)), w = through_half(random_floats(12, 36)),
         past = through_half(random_floats(18, 37));
    GraphBuilder g("ccws16", 27);
    auto outs = g.op(
        "CausalConvWithState",
        {g.input("x", DType::f16, xs), g.input("w", DType::f16, ws), graph::Value{}, g.input("past", DType::f16, ss)},
        {{"activation", std::string("silu")}}, 2);
    g.output(outs[0], "y");
    g.output(outs[1], "state");
    auto out =
        run_graph(g.build(), {{"x", half_tensor(xs, x)}, {"w", half_tensor(ws, w)}, {"past", half_tensor(ss, past)}});
    auto want = ref::causal_conv_with_state(dbl(x), 2, 3, 7, dbl(w), 4, {}, dbl(past), true);
    check_close(floats_of(out.at("y")), want, 0, 4e-3, 1e-3);
    check_close(floats_of(out.at("state")), want, 42, 0, 0);
  }
}

namespace {
struct LaCase {
  ref::LinearAttentionRef p;
  bool past;
};

// Runs one case on the op (state column private or in the workspace) and compares both outputs.
void check_linear_attention(const LaCase& c, bool force_global) {
  const auto& p = c.p;
  const bool gated = p.rule == "gated" || p.rule == "gated_delta";
  const bool delta = p.rule == "delta" || p.rule == "gated_delta";
  const Shape qs{p.B, p.T, p.Hq * p.dk}, ks{p.B, p.T, p.Hkv * p.dk}, vs{p.B, p.T, p.Hkv * p.dv},
      ss{p.B, p.Hkv, p.dk, p.dv}, ds{p.B, p.T, p.Hkv * (p.decay_per_key ? p.dk : 1)}, bs{p.B, p.T, p.beta_heads},
      os{p.B, p.T, p.Hq * p.dv};
  auto q = random_floats(size_t(qs.numel()), 41), v = random_floats(size_t(vs.numel()), 43);
  // Keys L2-normalised per head (as the delta rules expect), decays in log space (negative), beta in (0, 1).
  auto k = random_floats(size_t(ks.numel()), 42);
  for (size_t i = 0; i < k.size(); i += size_t(p.dk)) {
    double n = 0;
    for (int64_t d = 0; d < p.dk; ++d) n += double(k[i + size_t(d)]) * k[i + size_t(d)];
    for (int64_t d = 0; d < p.dk; ++d) k[i + size_t(d)] = float(k[i + size_t(d)] / std::sqrt(n + 1e-6));
  }
  auto decay = gated ? random_floats(size_t(ds.numel()), 44, -0.5f, -0.01f) : std::vector<float>{};
  auto beta = delta ? random_floats(size_t(bs.numel()), 45, 0.05f, 0.95f) : std::vector<float>{};
  auto past = c.past ? random_floats(size_t(ss.numel()), 46, -0.5f, 0.5f) : std::vector<float>{};
  auto want = ref::linear_attention(p, dbl(q), dbl(k), dbl(v), dbl(past), dbl(decay), dbl(beta));
  LinearAttentionConfig cfg;
  cfg.batch = p.B, cfg.seq = p.T, cfg.q_heads = p.Hq, cfg.kv_heads = p.Hkv, cfg.head_dim_k = p.dk,
  cfg.head_dim_v = p.dv;
  cfg.rule = p.rule == "linear"  ? LinearAttentionRule::linear
             : p.rule == "gated" ? LinearAttentionRule::gated
             : p.rule == "delta" ? LinearAttentionRule::delta
                                 : LinearAttentionRule::gated_delta;
  cfg.decay_per_key = p.decay_per_key, cfg.beta_heads = p.beta_heads, cfg.has_past = c.past, cfg.scale = float(p.scale);
  auto op = LinearAttention::create(ctx(), 0, cfg, force_global);
  std::vector<Tensor> in{up(q, qs), up(k, ks), up(v, vs)};
  if (c.past) in.push_back(up(past, ss));
  if (gated) in.push_back(up(decay, ds));
  if (delta) in.push_back(up(beta, bs));
  auto y = run2(*op, in, {{os, DType::f32}, {ss, DType::f32}});
  check_close(down<float>(y[0]), want, 0, 1e-4, 1e-5);
  check_close(down<float>(y[1]), want, size_t(os.numel()), 1e-4, 1e-5);
}
}  // namespace

TEST_CASE("LinearAttention against the reference: update rules, head dims, GQA, decode and prefill, past state") {
  std::vector<LaCase> cases;
  for (const char* rule : {"linear", "gated", "delta", "gated_delta"})
    for (int64_t dk : {1, 3, 17, 64})
      for (int64_t T : {1, 5, 33}) {
        ref::LinearAttentionRef p;
        p.rule = rule, p.dk = dk, p.T = T;
        p.dv = dk == 64 ? 64 : dk + 2;  // d_v != d_k except at 64
        p.B = T == 5 ? 2 : 1;
        p.Hkv = dk == 64 ? 2 : 3;
        p.Hq = p.Hkv * (T == 1 ? 1 : T == 5 ? 2 : 3);  // GQA ratios 1, 2, 3
        p.decay_per_key = dk != 17;
        p.beta_heads = T == 33 ? 1 : p.Hkv;
        p.scale = dk == 3 ? 0.3 : 0;
        cases.push_back({p, T != 33 || dk == 1});
      }
  for (const auto& c : cases) {
    CAPTURE(c.p.rule);
    CAPTURE(c.p.dk);
    CAPTURE(c.p.T);
    CAPTURE(c.past);
    check_linear_attention(c, false);
  }
  SUBCASE("the state in the workspace: d_k past the private limit, and a forced small one") {
    ref::LinearAttentionRef p;
    p.B = 1, p.T = 5, p.Hq = 2, p.Hkv = 1, p.dk = 130, p.dv = 7;
    check_linear_attention({p, true}, false);
    p.dk = 17, p.Hq = 3, p.rule = "delta", p.beta_heads = 1;
    check_linear_attention({p, false}, true);
  }
}

TEST_CASE("LinearAttention f16 through a graph: f16 activations with an f32 past state, and an f16 state") {
  for (bool f32_state : {true, false}) {
    CAPTURE(f32_state);
    ref::LinearAttentionRef p;
    p.B = 2, p.T = 5, p.Hq = 4, p.Hkv = 2, p.dk = 3, p.dv = 5, p.beta_heads = 2;
    const Shape qs{2, 5, 12}, ks{2, 5, 6}, vs{2, 5, 10}, ss{2, 2, 3, 5}, ds{2, 5, 6}, bs{2, 5, 2};
    auto q = through_half(random_floats(120, 51)), k = through_half(random_floats(60, 52, -0.5f, 0.5f)),
         v = through_half(random_floats(100, 53)), d = through_half(random_floats(60, 54, -0.5f, -0.01f)),
         b = through_half(random_floats(20, 55, 0.1f, 0.9f)), past = random_floats(60, 56, -0.5f, 0.5f);
    if (!f32_state) past = through_half(past);
    const DType st = f32_state ? DType::f32 : DType::f16;
    GraphBuilder g("la16", 27);
    auto outs = g.op("LinearAttention",
                     {g.input("q", DType::f16, qs), g.input("k", DType::f16, ks), g.input("v", DType::f16, vs),
                      g.input("past", st, ss), g.input("decay", DType::f16, ds), g.input("beta", DType::f16, bs)},
                     {{"q_num_heads", int64_t(4)}, {"kv_num_heads", int64_t(2)}}, 2);
    g.output(outs[0], "o");
    g.output(outs[1], "state");
    auto out = run_graph(g.build(), {{"q", half_tensor(qs, q)},
                                     {"k", half_tensor(ks, k)},
                                     {"v", half_tensor(vs, v)},
                                     {"past", f32_state ? HostTensor::from<float>(ss, past) : half_tensor(ss, past)},
                                     {"decay", half_tensor(ds, d)},
                                     {"beta", half_tensor(bs, b)}});
    REQUIRE(out.at("state").dtype() == st);
    auto want = ref::linear_attention(p, dbl(q), dbl(k), dbl(v), dbl(past), dbl(d), dbl(b));
    check_close(floats_of(out.at("o")), want, 0, 4e-3, 1e-3);
    check_close(floats_of(out.at("state")), want, 200, f32_state ? 1e-4 : 4e-3, f32_state ? 1e-5 : 1e-3);
  }
}

TEST_CASE("LLM ops: bad inputs are errors naming the node and the argument") {
  auto load_error = [](graph::Graph g) { return error_of([&] { compile_graph(std::move(g)); }); };
  {  // linear TensorScatter whose known write index runs past the cache
    GraphBuilder g("ts", 24);
    auto o = g.op1("TensorScatter", {g.input("c", DType::f32, Shape{2, 6, 3}), g.input("u", DType::f32, Shape{2, 2, 3}),
                                     g.constant("w", HostTensor::from<int64_t>(Shape{2}, std::vector<int64_t>{1, 5}))});
    g.output(o, "y");
    auto m = load_error(g.build());
    CHECK(m.find("TensorScatter") != std::string::npos);
    CHECK(m.find("write_indices") != std::string::npos);
    CHECK(m.find("holds 5") != std::string::npos);
  }
  {  // unknown mode
    GraphBuilder g("ts", 24);
    g.output(
        g.op1("TensorScatter", {g.input("c", DType::f32, Shape{2, 6, 3}), g.input("u", DType::f32, Shape{2, 2, 3})},
              {{"mode", std::string("ring")}}),
        "y");
    CHECK(load_error(g.build()).find("attribute mode must be 'linear' or 'circular', got 'ring'") != std::string::npos);
  }
  {  // update wider than the cache off the axis
    GraphBuilder g("ts", 24);
    g.output(
        g.op1("TensorScatter", {g.input("c", DType::f32, Shape{2, 6, 3}), g.input("u", DType::f32, Shape{2, 2, 4})}),
        "y");
    CHECK(load_error(g.build()).find("update has shape [2, 2, 4]") != std::string::npos);
  }
  {  // SwiGLU does not broadcast
    GraphBuilder g("sw", 28);
    g.output(g.op1("SwiGLU", {g.input("a", DType::f32, Shape{2, 4}), g.input("b", DType::f32, Shape{1, 4})}), "y");
    CHECK(load_error(g.build()).find("must have the same shape") != std::string::npos);
  }
  {  // SwiGLU on int32
    GraphBuilder g("sw", 28);
    g.output(g.op1("SwiGLU", {g.input("a", DType::i32, Shape{2, 4}), g.input("b", DType::i32, Shape{2, 4})}), "y");
    CHECK(load_error(g.build()).find("has dtype i32") != std::string::npos);
  }
  {  // CausalConvWithState: a past state of the wrong length, an unknown activation
    GraphBuilder g("cc", 27);
    auto o = g.op("CausalConvWithState",
                  {g.input("x", DType::f32, Shape{1, 3, 5}), g.input("w", DType::f32, Shape{3, 1, 4}), graph::Value{},
                   g.input("p", DType::f32, Shape{1, 3, 4})},
                  {}, 2);
    g.output(o[0], "y");
    CHECK(load_error(g.build()).find("(past_state) has shape [1, 3, 4], expected [1, 3, 3]") != std::string::npos);
    GraphBuilder h("cc", 27);
    h.output(h.op("CausalConvWithState",
                  {h.input("x", DType::f32, Shape{1, 3, 5}), h.input("w", DType::f32, Shape{3, 1, 4})},
                  {{"activation", std::string("gelu")}}, 2)[0],
             "y");
    CHECK(load_error(h.build()).find("attribute activation must be 'none', 'silu' or 'swish', got 'gelu'") !=
          std::string::npos);
  }
  {  // LinearAttention: the rule needs decay; GQA ratio; past state shape
    auto la = [](const std::string& rule, int64_t hq, int64_t hkv, bool decay, Shape past) {
      GraphBuilder g("la", 27);
      std::vector<graph::Value> in{g.input("q", DType::f32, Shape{1, 2, 12}),
                                   g.input("k", DType::f32, Shape{1, 2, hkv * (12 / hq)}),
                                   g.input("v", DType::f32, Shape{1, 2, hkv * 2})};
      in.push_back(past.rank() ? g.input("past", DType::f32, past) : graph::Value{});
      in.push_back(decay ? g.input("decay", DType::f32, Shape{1, 2, hkv}) : graph::Value{});
      g.output(g.op("LinearAttention", in, {{"q_num_heads", hq}, {"kv_num_heads", hkv}, {"update_rule", rule}}, 2)[0],
               "o");
      return g.build();
    };
    CHECK(load_error(la("gated", 4, 2, false, {})).find("update_rule 'gated' requires input decay") !=
          std::string::npos);
    CHECK(load_error(la("linear", 4, 2, true, {})).find("update_rule 'linear' forbids input decay") !=
          std::string::npos);
    CHECK(load_error(la("linear", 4, 3, false, {}))
              .find("q_num_heads (4) must be a positive multiple of kv_num_heads (3)") != std::string::npos);
    CHECK(load_error(la("linear", 4, 2, false, Shape{1, 2, 3, 3}))
              .find("(past_state) has shape [1, 2, 3, 3], expected [1, 2, 3, 2]") != std::string::npos);
    CHECK(load_error(la("fast", 4, 2, false, {})).find("attribute update_rule must be") != std::string::npos);
    GraphBuilder g("la", 27);  // decay of neither allowed width, beta of the wrong width
    g.output(
        g.op("LinearAttention",
             {g.input("q", DType::f32, Shape{1, 2, 12}), g.input("k", DType::f32, Shape{1, 2, 6}),
              g.input("v", DType::f32, Shape{1, 2, 4}), graph::Value{}, g.input("d", DType::f32, Shape{1, 2, 5})},
             {{"q_num_heads", int64_t(4)}, {"kv_num_heads", int64_t(2)}, {"update_rule", std::string("gated")}}, 2)[0],
        "o");
    CHECK(load_error(g.build()).find("(decay) has shape [1, 2, 5], expected [1, 2, 6] (per key dim) or [1, 2, 2]") !=
          std::string::npos);
    GraphBuilder h("la", 27);
    h.output(
        h.op("LinearAttention",
             {h.input("q", DType::f32, Shape{1, 2, 12}), h.input("k", DType::f32, Shape{1, 2, 6}),
              h.input("v", DType::f32, Shape{1, 2, 4}), graph::Value{}, graph::Value{},
              h.input("b", DType::f32, Shape{1, 2, 3})},
             {{"q_num_heads", int64_t(4)}, {"kv_num_heads", int64_t(2)}, {"update_rule", std::string("delta")}}, 2)[0],
        "o");
    CHECK(load_error(h.build()).find("(beta) has shape [1, 2, 3], expected [1, 2, 2] or [1, 2, 1]") !=
          std::string::npos);
  }
}

// The measurement behind LinearAttention's one-launch design (skipped by default; run with --no-skip -tc='*timing*'):
// the op over all T steps in one launch against the naive step loop (the same kernel with T = 1 launched T times, the
// state going through global memory between launches, ping-ponged), and the one-launch kernel with the state column
// in the workspace instead of private memory. Prints median milliseconds; checks the step loop's result too.
TEST_CASE("LinearAttention timing: one launch vs a step loop" * doctest::skip()) {
  const int64_t B = 1, T = 256, H = 8, dk = 64, dv = 64;
  LinearAttentionConfig cfg;
  cfg.batch = B, cfg.seq = T, cfg.q_heads = H, cfg.kv_heads = H, cfg.head_dim_k = dk, cfg.head_dim_v = dv;
  cfg.has_past = true, cfg.beta_heads = H;
  const Shape xs{B, T, H * dk}, ds{B, T, H * dk}, bs{B, T, H}, ss{B, H, dk, dv};
  Tensor q = up(random_floats(size_t(xs.numel()), 61), xs),
         k = up(random_floats(size_t(xs.numel()), 62, -0.1f, 0.1f), xs),
         v = up(random_floats(size_t(xs.numel()), 63), xs),
         d = up(random_floats(size_t(ds.numel()), 64, -0.3f, -0.01f), ds),
         b = up(random_floats(size_t(bs.numel()), 65, 0.1f, 0.9f), bs),
         past = up(std::vector<float>(size_t(ss.numel())), ss);
  Tensor o = ctx().alloc(xs, DType::f32), s = ctx().alloc(ss, DType::f32), s2 = ctx().alloc(ss, DType::f32);
  auto median_ms = [](const std::function<void()>& f) {
    std::vector<double> ms;
    for (int r = 0; r < 7; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      f();
      ctx().finish();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  for (bool global : {false, true}) {
    auto op = LinearAttention::create(ctx(), 0, cfg, global);
    Tensor ws = ctx().alloc(Shape{int64_t(op->workspace_bytes() / 4 + 1)}, DType::f32);
    const double t = median_ms([&] {
      auto ec = ctx().exec();
      Tensor outs[2] = {o, s};
      op->enqueue(std::vector<Tensor>{q, k, v, past, d, b}, outs, &ws, ec);
    });
    MESSAGE("one launch, state " << std::string(global ? "in the workspace" : "private") << ": " << t << " ms");
  }
  auto one = down<float>(s);
  LinearAttentionConfig step = cfg;
  step.seq = 1;
  auto op1 = LinearAttention::create(ctx(), 0, step);
  const double t = median_ms([&] {
    for (int64_t i = 0; i < T; ++i) {
      auto ec = ctx().exec();
      const Tensor& in_state = i == 0 ? past : (i % 2 ? s : s2);
      const Tensor& out_state = i % 2 ? s2 : s;
      Tensor outs[2] = {o.slice_elems(i * H * dv, H * dv, Shape{1, 1, H * dv}), out_state};
      op1->enqueue(std::vector<Tensor>{q.slice_elems(i * H * dk, H * dk, Shape{1, 1, H * dk}),
                                       k.slice_elems(i * H * dk, H * dk, Shape{1, 1, H * dk}),
                                       v.slice_elems(i * H * dv, H * dv, Shape{1, 1, H * dv}), in_state,
                                       d.slice_elems(i * H * dk, H * dk, Shape{1, 1, H * dk}),
                                       b.slice_elems(i * H, H, Shape{1, 1, H})},
                   outs, nullptr, ec);
    }
  });
  MESSAGE("step loop (" << T << " launches): " << t << " ms");
  auto stepped = down<float>(T % 2 ? s : s2);
  CLDL_CHECK_CLOSE(stepped.data(), one.data(), one.size(), 1e-4, 1e-5);
}

namespace {
// A one-input modifier subgraph: y = op(x, k).
graph::SubGraph modifier(const std::string& name, const Shape& s, const std::string& op, const HostTensor& k) {
  GraphBuilder g(name, 26);
  g.output(g.op1(op, {g.input(name + "_in", DType::f32, s), g.constant(name + "_k", k)}));
  return std::make_shared<graph::Graph>(g.build());
}

// A FlexAttention graph (ai.onnx.preview) on inputs q, k, v of dtype dt.
graph::Graph flex_graph(const Shape& qs, const Shape& ks, const Shape& vs, DType dt,
                        std::map<std::string, graph::AttrValue> attrs, int64_t opset = 26) {
  GraphBuilder g("flex", opset);
  g.output(g.op("FlexAttention", {g.input("q", dt, qs), g.input("k", dt, ks), g.input("v", dt, vs)}, std::move(attrs),
                1, "ai.onnx.preview")[0],
           "y");
  return g.build();
}
}  // namespace

TEST_CASE("FlexAttention against the reference: GQA, score_mod (soft cap, mask) and prob_mod subgraphs inlined, f16") {
  struct Case {
    int64_t B, Hq, Hkv, L, S, E, Ev;
    std::string mods;  // "", "softcap", "mask+prob"
    bool f16 = false;
    int64_t opset = 26;  // below 23 (no ONNX Attention) no modifiers still expands into MatMul / Softmax
  };
  const Case cases[] = {
      {1, 6, 2, 5, 33, 17, 3, "softcap"},  {2, 3, 3, 1, 7, 64, 64, "mask+prob"},   {1, 1, 1, 4, 4, 1, 5, ""},
      {2, 4, 1, 3, 5, 3, 2, "mask+prob"},  {1, 2, 2, 5, 6, 8, 4, "softcap", true}, {2, 6, 3, 3, 7, 5, 4, "", false, 22},
      {1, 2, 1, 3, 4, 8, 8, "", true, 22},
  };
  for (const auto& c : cases) {
    CAPTURE(c.Hq);
    CAPTURE(c.mods);
    CAPTURE(c.f16);
    const Shape qs{c.B, c.Hq, c.L, c.E}, ks{c.B, c.Hkv, c.S, c.E}, vs{c.B, c.Hkv, c.S, c.Ev},
        scores{c.B, c.Hq, c.L, c.S};
    auto q = random_floats(size_t(qs.numel()), 71, -2.0f, 2.0f), k = random_floats(size_t(ks.numel()), 72, -2.0f, 2.0f),
         v = random_floats(size_t(vs.numel()), 73);
    if (c.f16) q = through_half(q), k = through_half(k), v = through_half(v);
    const double scale = c.mods == "mask+prob" ? 0.4 : 1.0 / std::sqrt(double(c.E));
    std::map<std::string, graph::AttrValue> attrs;
    if (c.mods == "mask+prob") attrs["scale"] = 0.4f;
    ref::FlexMod score_mod, prob_mod;
    const float cap = 1.5f;
    std::vector<float> mask(size_t(c.L * c.S)), weight(size_t(c.Hq * c.S));
    for (int64_t i = 0; i < c.L; ++i)  // causal, the query block at the end of the keys
      for (int64_t j = 0; j < c.S; ++j) mask[size_t(i * c.S + j)] = j <= i + c.S - c.L ? 0.0f : -INFINITY;
    for (size_t i = 0; i < weight.size(); ++i) weight[i] = 0.5f + 0.1f * float(i % 7);
    if (c.mods == "softcap") {
      GraphBuilder g("softcap", 26);
      auto x = g.input("s", DType::f32, scores);
      auto t = g.op1("Tanh",
                     {g.op1("Div", {x, g.constant("cap", HostTensor::from<float>(Shape{}, std::vector<float>{cap}))})});
      g.output(g.op1("Mul", {t, g.constant("cap2", HostTensor::from<float>(Shape{}, std::vector<float>{cap}))}));
      attrs["score_mod"] = std::make_shared<graph::Graph>(g.build());
      score_mod = [&](int64_t, int64_t, int64_t, int64_t, double s) { return cap * std::tanh(s / cap); };
    } else if (c.mods == "mask+prob") {
      attrs["score_mod"] = modifier("mask", scores, "Add", HostTensor::from<float>(Shape{1, 1, c.L, c.S}, mask));
      attrs["prob_mod"] = modifier("prob", scores, "Mul", HostTensor::from<float>(Shape{1, c.Hq, 1, c.S}, weight));
      score_mod = [&](int64_t, int64_t, int64_t i, int64_t j, double s) {
        return s + double(mask[size_t(i * c.S + j)]);
      };
      prob_mod = [&](int64_t, int64_t h, int64_t, int64_t j, double p) {
        return p * double(weight[size_t(h * c.S + j)]);
      };
    }
    const DType dt = c.f16 ? DType::f16 : DType::f32;
    auto feed = [&](const Shape& s, const std::vector<float>& x) {
      return c.f16 ? half_tensor(s, x) : HostTensor::from<float>(s, x);
    };
    auto out = run_graph(flex_graph(qs, ks, vs, dt, attrs, c.opset),
                         {{"q", feed(qs, q)}, {"k", feed(ks, k)}, {"v", feed(vs, v)}});
    const HostTensor& got = out.at("y");
    REQUIRE(got.dtype() == dt);
    REQUIRE(got.shape() == Shape{c.B, c.Hq, c.L, c.Ev});
    auto want =
        ref::flex_attention(dbl(q), dbl(k), dbl(v), c.B, c.Hq, c.Hkv, c.L, c.S, c.E, c.Ev, scale, score_mod, prob_mod);
    check_close(floats_of(got), want, 0, c.f16 ? 4e-3 : 1e-4, c.f16 ? 1e-3 : 1e-5);
  }
}

TEST_CASE("FlexAttention: bad inputs are errors naming the node and the argument") {
  auto flex = [](Shape q, Shape k, Shape v, std::map<std::string, graph::AttrValue> attrs = {}) {
    return error_of([&] { compile_graph(flex_graph(q, k, v, DType::f32, std::move(attrs))); });
  };
  CHECK(flex({1, 2, 3}, {1, 2, 3, 4}, {1, 2, 3, 4}).find("input 'q' (Q) must be rank 4") != std::string::npos);
  CHECK(flex({1, 3, 2, 4}, {1, 2, 5, 4}, {1, 2, 5, 4}).find("Q's 3 heads are not a multiple of K's 2") !=
        std::string::npos);
  CHECK(flex({1, 2, 2, 4}, {1, 2, 5, 4}, {1, 2, 6, 4}).find("do not agree") != std::string::npos);
  CHECK(flex({1, 2, 2, 4}, {1, 2, 5, 4}, {1, 2, 5, 4}, {{"softmax_precision", int64_t(10)}})
            .find("attribute softmax_precision = 10 is not supported") != std::string::npos);
}

TEST_CASE("LLM ops: empty sequences carry the state through") {
  SUBCASE("LinearAttention T = 0: present_state is past_state") {
    LinearAttentionConfig cfg;
    cfg.batch = 2, cfg.seq = 0, cfg.q_heads = 2, cfg.kv_heads = 1, cfg.head_dim_k = 3, cfg.head_dim_v = 5;
    cfg.rule = LinearAttentionRule::linear, cfg.has_past = true;
    const Shape ss{2, 1, 3, 5};
    auto past = random_floats(30, 81);
    auto op = LinearAttention::create(ctx(), 0, cfg);
    auto y = run2(*op,
                  {up(std::vector<float>{}, Shape{2, 0, 6}), up(std::vector<float>{}, Shape{2, 0, 3}),
                   up(std::vector<float>{}, Shape{2, 0, 5}), up(past, ss)},
                  {{Shape{2, 0, 10}, DType::f32}, {ss, DType::f32}});
    CHECK(down<float>(y[1]) == past);
  }
  SUBCASE("CausalConvWithState L = 0: present_state is past_state") {
    const Shape ss{1, 3, 2};
    auto past = random_floats(6, 82);
    auto op = CausalConvWithState::create(ctx(), 0, {Shape{1, 3, 0}, 3, DType::f32, false, true, false});
    auto y =
        run2(*op, {up(std::vector<float>{}, Shape{1, 3, 0}), up(random_floats(9, 83), Shape{3, 1, 3}), up(past, ss)},
             {{Shape{1, 3, 0}, DType::f32}, {ss, DType::f32}});
    CHECK(down<float>(y[1]) == past);
  }
  SUBCASE("TensorScatter with an empty update copies the cache") {
    const Shape cs{2, 4, 3};
    auto cache = random_floats(24, 84);
    auto op = TensorScatter::create(ctx(), 0, {cs, Shape{2, 0, 3}, DType::f32, 1, true, false});
    CHECK(down<float>(run_op(*op, {up(cache, cs), up(std::vector<float>{}, Shape{2, 0, 3})}, cs)) == cache);
  }
}

TEST_CASE("LLM ops: a prefill then decode steps, each step's present state fed back as past, equals one run") {
  SUBCASE("LinearAttention gated_delta, GQA 2: T = 5 prefill + 3 decode steps vs T = 8") {
    const int64_t B = 2, Hq = 4, Hkv = 2, dk = 17, dv = 6, T = 8;
    auto q = random_floats(size_t(B * T * Hq * dk), 91), k = random_floats(size_t(B * T * Hkv * dk), 92, -0.3f, 0.3f),
         v = random_floats(size_t(B * T * Hkv * dv), 93), d = random_floats(size_t(B * T * Hkv), 94, -0.4f, -0.01f),
         beta = random_floats(size_t(B * T * Hkv), 95, 0.1f, 0.9f);
    // Rows [t0, t1) of a [B, T, w] tensor.
    auto rows = [&](const std::vector<float>& x, int64_t w, int64_t t0, int64_t t1) {
      std::vector<float> r;
      for (int64_t b = 0; b < B; ++b) r.insert(r.end(), x.begin() + (b * T + t0) * w, x.begin() + (b * T + t1) * w);
      return r;
    };
    auto run = [&](int64_t t0, int64_t t1, const std::vector<float>* past) {
      LinearAttentionConfig cfg;
      cfg.batch = B, cfg.seq = t1 - t0, cfg.q_heads = Hq, cfg.kv_heads = Hkv, cfg.head_dim_k = dk, cfg.head_dim_v = dv;
      cfg.decay_per_key = false, cfg.beta_heads = Hkv, cfg.has_past = past != nullptr;
      const int64_t n = t1 - t0;
      auto op = LinearAttention::create(ctx(), 0, cfg);
      std::vector<Tensor> in{up(rows(q, Hq * dk, t0, t1), Shape{B, n, Hq * dk}),
                             up(rows(k, Hkv * dk, t0, t1), Shape{B, n, Hkv * dk}),
                             up(rows(v, Hkv * dv, t0, t1), Shape{B, n, Hkv * dv})};
      if (past) in.push_back(up(*past, Shape{B, Hkv, dk, dv}));
      in.push_back(up(rows(d, Hkv, t0, t1), Shape{B, n, Hkv}));
      in.push_back(up(rows(beta, Hkv, t0, t1), Shape{B, n, Hkv}));
      auto y = run2(*op, in, {{Shape{B, n, Hq * dv}, DType::f32}, {Shape{B, Hkv, dk, dv}, DType::f32}});
      return std::pair{down<float>(y[0]), down<float>(y[1])};
    };
    auto [all_out, all_state] = run(0, T, nullptr);
    auto [out, state] = run(0, 5, nullptr);
    std::vector<std::vector<float>> pieces{out};  // [B, n, ...] per piece; joined in time order per batch entry
    for (int64_t t = 5; t < T; ++t) {
      auto [o, s] = run(t, t + 1, &state);
      pieces.push_back(o);
      state = s;
    }
    std::vector<float> joined;
    for (int64_t b = 0; b < B; ++b)
      for (size_t p = 0; p < pieces.size(); ++p) {
        const int64_t n = p == 0 ? 5 : 1, w = Hq * dv;
        joined.insert(joined.end(), pieces[p].begin() + b * n * w, pieces[p].begin() + (b + 1) * n * w);
      }
    CLDL_CHECK_CLOSE(joined.data(), all_out.data(), all_out.size(), 1e-5, 1e-6);
    CLDL_CHECK_CLOSE(state.data(), all_state.data(), all_state.size(), 1e-5, 1e-6);
  }
  SUBCASE("CausalConvWithState k 4: chunks of 2, 1 and 4 vs the 7 positions at once") {
    const int64_t B = 2, C = 3, K = 4, L = 7;
    auto x = random_floats(size_t(B * C * L), 96), w = random_floats(size_t(C * K), 97), bias = random_floats(3, 98);
    auto run = [&](int64_t l0, int64_t l1, const std::vector<float>* past) {
      const int64_t n = l1 - l0;
      std::vector<float> xs;
      for (int64_t r = 0; r < B * C; ++r) xs.insert(xs.end(), x.begin() + r * L + l0, x.begin() + r * L + l1);
      auto op = CausalConvWithState::create(ctx(), 0, {Shape{B, C, n}, K, DType::f32, true, past != nullptr, true});
      std::vector<Tensor> in{up(xs, Shape{B, C, n}), up(w, Shape{C, 1, K}), up(bias, Shape{C})};
      if (past) in.push_back(up(*past, Shape{B, C, K - 1}));
      auto y = run2(*op, in, {{Shape{B, C, n}, DType::f32}, {Shape{B, C, K - 1}, DType::f32}});
      return std::pair{down<float>(y[0]), down<float>(y[1])};
    };
    auto [all_out, all_state] = run(0, L, nullptr);
    std::vector<float> joined(size_t(B * C * L)), state;
    int64_t at = 0;
    for (int64_t n : {2, 1, 4}) {
      auto [o, s] = run(at, at + n, at == 0 ? nullptr : &state);
      for (int64_t r = 0; r < B * C; ++r)
        std::copy(o.begin() + r * n, o.begin() + (r + 1) * n, joined.begin() + r * L + at);
      state = s;
      at += n;
    }
    CLDL_CHECK_CLOSE(joined.data(), all_out.data(), all_out.size(), 1e-6, 1e-6);
    CHECK(state == all_state);
  }
}
