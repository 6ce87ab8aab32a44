// Dynamic shapes: one loaded Model runs any input shape its graph allows through a plan per signature
// (models/model.hpp). Checked against C++ references at random shapes, with the plan cache's counters,
// its memory bound over 10 000 calls, errors that name the node / shapes / inputs, shape-deciding
// inputs, and two threads running two shapes at once.
#include <atomic>
#include <set>
#include <random>
#include <thread>
#include <tuple>

#include <filesystem>

#include "capi/cldl.h"
#include "models/model.hpp"
#include "models/onnx_import.hpp"
#include "models/npy.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

using test::sym_shape;

HostTensor random_tensor(Shape s, std::mt19937& rng) {
  HostTensor t(DType::f32, std::move(s));
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto& v : t.span<float>()) v = u(rng);
  return t;
}

constexpr int64_t kIn = 8, kOut = 6;

// x [batch, seq, 8] -> MatMul W [8, 6] -> Add b -> Relu -> Reshape to [batch * seq, 6] (the target shape
// computed from Shape(x): Gather, ReduceProd-free Mul, Concat) -> Softmax.
Graph encoder_graph() {
  GraphBuilder b("enc");
  auto x = b.input("x", DType::f32, sym_shape({-1, -1, kIn}, {"batch", "seq", ""}));
  std::vector<float> w(kIn * kOut), bias(kOut);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 7 % 11) - 5) * 0.15f;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = float(int(i % 3) - 1) * 0.2f;
  auto wv = b.constant("w", HostTensor::from<float>(Shape{kIn, kOut}, w));
  auto bv = b.constant("b", HostTensor::from<float>(Shape{kOut}, bias));
  auto h = b.relu(b.add(b.matmul(x, wv), bv));
  auto shape = b.op1("Shape", {x});
  auto i0 = b.constant("i0", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{0}));
  auto i1 = b.constant("i1", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{1}));
  auto rows = b.op1("Mul", {b.op1("Gather", {shape, i0}, {{"axis", int64_t(0)}}),
                            b.op1("Gather", {shape, i1}, {{"axis", int64_t(0)}})});
  auto cols = b.constant("cols", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{kOut}));
  auto target = b.op1("Concat", {rows, cols}, {{"axis", int64_t(0)}});
  b.output(b.softmax(b.op1("Reshape", {h, target})), "y");
  return b.build();
}

std::vector<float> encoder_ref(const Graph& g, const HostTensor& x) {
  const float* w = g.initializers.at("w").as<float>();
  const float* bias = g.initializers.at("b").as<float>();
  int64_t rows = x.shape()[0] * x.shape()[1];
  std::vector<float> y(size_t(rows * kOut));
  for (int64_t r = 0; r < rows; ++r) {
    double h[kOut], mx = -1e30, sum = 0;
    for (int64_t o = 0; o < kOut; ++o) {
      double s = bias[o];
      for (int64_t k = 0; k < kIn; ++k) s += double(x.as<float>()[r * kIn + k]) * w[k * kOut + o];
      h[o] = std::max(s, 0.0);
      mx = std::max(mx, h[o]);
    }
    for (int64_t o = 0; o < kOut; ++o) sum += std::exp(h[o] - mx);
    for (int64_t o = 0; o < kOut; ++o) y[size_t(r * kOut + o)] = float(std::exp(h[o] - mx) / sum);
  }
  return y;
}

void check_close(const HostTensor& got, const std::vector<float>& want, float tol = 1e-5f) {
  REQUIRE(size_t(got.numel()) == want.size());
  for (size_t i = 0; i < want.size(); ++i)
    if (std::fabs(got.as<float>()[i] - want[i]) > tol) FAIL("element " << i << ": " << got.as<float>()[i] << " vs " << want[i]);
}

}  // namespace

// Models exported by PyTorch with dynamic dims (tests/data/dynamic/make.py) and ONNX Runtime's outputs for
// random shapes: one load, every case in one session.
void check_exported(const std::string& name, const std::vector<std::string>& inputs,
                    const std::vector<std::string>& outputs, double rtol, double atol) {
  const std::string dir = std::string(CLDL_SOURCE_DIR) + "/tests/data/dynamic/";
  ModelOptions mo;
  mo.plan_cache = 64;  // every signature stays cached: misses = distinct shapes
  auto m = load_model(test::shared_ctx(), dir + name + ".onnx", mo);
  CHECK(m->preplanned() == nullptr);
  // No input decides shapes by its values here (token ids and masks are data): one plan per shape.
  CHECK(m->shape_inputs().empty());
  auto s = m->session();
  int cases = 0;
  std::set<std::string> signatures;
  for (int k = 0; std::filesystem::exists(fmt::format("{}{}/{}_{}.npy", dir, name, k, outputs[0])); ++k, ++cases) {
    std::map<std::string, HostTensor> feed;
    for (auto& in : inputs) feed[in] = read_npy(fmt::format("{}{}/{}_{}.npy", dir, name, k, in));
    CAPTURE(k);
    CAPTURE(feed.begin()->second.shape().str());
    signatures.insert(feed.begin()->second.shape().str());
    auto out = s->run(feed);
    for (auto& output : outputs) {
      CAPTURE(output);
      HostTensor want = read_npy(fmt::format("{}{}/{}_{}.npy", dir, name, k, output));
      const HostTensor& got = out.at(output);
      REQUIRE(got.shape() == want.shape());
      double worst = 0;
      for (int64_t i = 0; i < got.numel(); ++i) {
        double a = got.as<float>()[i], b = want.as<float>()[i];
        worst = std::max(worst, std::fabs(a - b) / (atol + rtol * std::fabs(b)));
      }
      CHECK(worst <= 1.0);
    }
  }
  CHECK(cases >= 6);
  auto st = m->plan_cache_stats();
  CHECK(st.misses == signatures.size());
  MESSAGE(name << ": " << cases << " shapes in one session, " << st.misses << " plans, last plan "
               << st.last_plan_ms << " ms");
}

TEST_SUITE("dynamic shapes") {
  TEST_CASE("PyTorch exports with dynamic dims against ONNX Runtime at random shapes") {
    const std::vector<std::string> ids{"input_ids", "attention_mask"};
    SUBCASE("BERT-style encoder, opset 14") { check_exported("bert_opset14", ids, {"last_hidden_state"}, 1e-3, 1e-4); }
    SUBCASE("BERT-style encoder, opset 11") { check_exported("bert_opset11", ids, {"last_hidden_state"}, 1e-3, 1e-4); }
    SUBCASE("CNN, dynamic batch and image size") { check_exported("cnn", {"image"}, {"logits"}, 1e-3, 1e-4); }
    // torch.jit.script: a for over a dim (Loop) and an if on a dim (If), expanded per plan.
    SUBCASE("scripted control flow, opset 13") { check_exported("scripted_opset13", {"x"}, {"y", "acc"}, 1e-5, 1e-6); }
    SUBCASE("scripted control flow, opset 11") { check_exported("scripted_opset11", {"x"}, {"y", "acc"}, 1e-5, 1e-6); }
    // A list appended in a for (sequence values in a Loop body), then torch.stack / torch.cat.
    SUBCASE("scripted list append") { check_exported("list_append", {"x"}, {"stacked", "cat"}, 1e-6, 1e-6); }
    // A while on the data's sum: each condition is read back (a staged plan per iteration).
    SUBCASE("scripted while on data") { check_exported("while", {"x"}, {"acc"}, 1e-5, 1e-5); }
    // torchvision.ops.nms (NonMaxSuppression) over up to 6000 boxes and torch.nonzero (NonZero, counts of 0
    // too), gathered downstream: counted outputs, the rest planned per count.
    SUBCASE("detection: nms and nonzero on run-time data") {
      check_exported("detect", {"feats"}, {"boxes", "scores", "strong_sum"}, 1e-4, 1e-4);
    }
  }

  TEST_CASE("one load runs any input shape: a plan per signature, cached and reused") {
    Graph g = encoder_graph();
    ModelOptions mo;
    mo.plan_cache = 64;
    auto m = Model::create(test::shared_ctx(), g, mo);
    CHECK(m->preplanned() == nullptr);  // batch and seq are symbolic, nothing fixed them
    CHECK(m->graph().inputs[0].shape.str() == "[batch, seq, 8]");
    auto s = m->session();
    std::mt19937 rng(3);
    std::set<std::pair<int64_t, int64_t>> seen;
    for (int i = 0; i < 20; ++i) {
      int64_t batch = 1 + int64_t(rng() % 4), seq = 1 + int64_t(rng() % 13);
      CAPTURE(batch);
      CAPTURE(seq);
      seen.insert({batch, seq});
      HostTensor x = random_tensor(Shape{batch, seq, kIn}, rng);
      auto out = s->run({{"x", x}});
      CHECK(out.at("y").shape() == Shape{batch * seq, kOut});
      check_close(out.at("y"), encoder_ref(g, x));
    }
    auto st = m->plan_cache_stats();
    CHECK(st.misses == seen.size());
    CHECK(st.hits == 20 - seen.size());
    CHECK(st.plans == seen.size());
    // A known signature: its plan, no planning.
    auto [b0, s0] = *seen.begin();
    s->run({{"x", random_tensor(Shape{b0, s0, kIn}, rng)}});
    CHECK(m->plan_cache_stats().misses == seen.size());
    CHECK(m->plan_cache_stats().hits == 21 - seen.size());
  }

  TEST_CASE("a signature fixed at load is planned at load; inputs keep their symbols") {
    ModelOptions mo;
    mo.prepare.dims = {{"batch", 2}, {"seq", 5}};
    auto m = Model::create(test::shared_ctx(), encoder_graph(), mo);
    REQUIRE(m->preplanned() != nullptr);
    CHECK(m->preplanned()->graph().inputs[0].shape.to_shape() == Shape{2, 5, kIn});
    CHECK(m->graph().inputs[0].shape.str() == "[batch, seq, 8]");
    CHECK(m->plan_cache_stats().misses == 1);
    std::mt19937 rng(5);
    auto s = m->session();
    s->run({{"x", random_tensor(Shape{2, 5, kIn}, rng)}});
    CHECK(m->plan_cache_stats().hits == 1);  // the run found the load's plan
    s->run({{"x", random_tensor(Shape{3, 1, kIn}, rng)}});  // and any other shape still runs
    CHECK(m->plan_cache_stats().misses == 2);
  }

  TEST_CASE("a shape the graph cannot take names the node, the shapes and the inputs; the session goes on") {
    GraphBuilder b("bad");
    auto a = b.input("a", DType::f32, sym_shape({-1, 3}, {"n", ""}));
    auto c = b.input("c", DType::f32, sym_shape({-1, 3}, {"m", ""}));
    auto sum = b.add(a, c);
    b.output(b.op1("Reshape", {sum, b.constant("four", HostTensor::from<int64_t>(Shape{2}, std::vector<int64_t>{-1, 4}))}),
             "y");
    Graph g = b.build();
    std::string add_name = g.nodes[0].name;
    auto m = Model::create(test::shared_ctx(), g);
    auto s = m->session();
    std::mt19937 rng(1);
    // Broadcast mismatch: 2 vs 3 rows.
    try {
      s->run({{"a", random_tensor(Shape{2, 3}, rng)}, {"c", random_tensor(Shape{3, 3}, rng)}});
      FAIL("no error");
    } catch (const Error& e) {
      std::string msg = e.what();
      CAPTURE(msg);
      CHECK(msg.find("a: [2, 3], c: [3, 3]") != std::string::npos);
      CHECK(msg.find(add_name) != std::string::npos);
      CHECK(msg.find("Add") != std::string::npos);
    }
    // A Reshape to [-1, 4] of 5 x 3 elements does not divide.
    try {
      s->run({{"a", random_tensor(Shape{5, 3}, rng)}, {"c", random_tensor(Shape{1, 3}, rng)}});
      FAIL("no error");
    } catch (const Error& e) {
      std::string msg = e.what();
      CAPTURE(msg);
      CHECK(msg.find("a: [5, 3], c: [1, 3]") != std::string::npos);
      CHECK(msg.find("Reshape") != std::string::npos);
    }
    CHECK(m->plan_cache_stats().plans == 0);  // failed plans are not cached
    // A fixed dim of the wrong size, a wrong rank, an unknown input: named before any planning.
    CHECK_THROWS_WITH(s->run({{"a", random_tensor(Shape{4, 2}, rng)}, {"c", random_tensor(Shape{4, 3}, rng)}}),
                      doctest::Contains("input 'a' dimension 1: expected 3"));
    CHECK_THROWS_WITH(s->run({{"a", random_tensor(Shape{12}, rng)}, {"c", random_tensor(Shape{4, 3}, rng)}}),
                      doctest::Contains("input 'a': expected rank 2"));
    CHECK_THROWS_WITH(s->run({{"a", random_tensor(Shape{4, 3}, rng)}, {"z", random_tensor(Shape{4, 3}, rng)}}),
                      doctest::Contains("input 'z' is not an input of graph 'bad'"));
    // The same session runs the next good call: 4 x 3 + 1 x 3 broadcast, reshaped to [3, 4].
    HostTensor a4 = random_tensor(Shape{4, 3}, rng), c1 = random_tensor(Shape{1, 3}, rng);
    auto out = s->run({{"a", a4}, {"c", c1}});
    REQUIRE(out.at("y").shape() == Shape{3, 4});
    std::vector<float> want(12);
    for (int i = 0; i < 12; ++i) want[size_t(i)] = a4.as<float>()[i] + c1.as<float>()[i % 3];
    check_close(out.at("y"), want, 0);
  }

  TEST_CASE("one value per symbol across inputs") {
    GraphBuilder b("sym");
    auto x = b.input("x", DType::f32, sym_shape({-1, 2}, {"batch", ""}));
    auto y = b.input("y", DType::f32, sym_shape({-1, 2}, {"batch", ""}));
    b.output(b.add(x, y), "z");
    auto m = Model::create(test::shared_ctx(), b.build());
    std::mt19937 rng(2);
    CHECK_THROWS_WITH(m->session()->run({{"x", random_tensor(Shape{2, 2}, rng)}, {"y", random_tensor(Shape{3, 2}, rng)}}),
                      doctest::Contains("('batch') is 3, but input 'x' has 'batch' = 2"));
  }

  TEST_CASE("an input that decides shapes by its value is part of the signature") {
    GraphBuilder b("reshape_by_input");
    auto x = b.input("x", DType::f32, sym_shape({-1}, {"n"}));
    auto shape = b.input("shape", DType::i64, Shape{2});
    b.output(b.op1("Reshape", {x, shape}), "y");
    auto m = Model::create(test::shared_ctx(), b.build());
    REQUIRE(m->shape_inputs() == std::vector<std::string>{"shape"});
    auto s = m->session();
    std::mt19937 rng(4);
    HostTensor x6 = random_tensor(Shape{6}, rng);
    for (auto dims : {std::vector<int64_t>{2, 3}, std::vector<int64_t>{3, 2}, std::vector<int64_t>{-1, 1}}) {
      auto out = s->run({{"x", x6}, {"shape", HostTensor::from<int64_t>(Shape{2}, dims)}});
      CHECK(out.at("y").shape() == Shape{dims[0] < 0 ? 6 : dims[0], dims[1]});
      check_close(out.at("y"), std::vector<float>(x6.as<float>(), x6.as<float>() + 6), 0);
    }
    CHECK(m->plan_cache_stats().misses == 3);
    s->run({{"x", x6}, {"shape", HostTensor::from<int64_t>(Shape{2}, std::vector<int64_t>{3, 2})}});
    CHECK(m->plan_cache_stats().misses == 3);
  }

  TEST_CASE("10 000 calls over random shapes keep device memory within the plan cache's bound") {
    auto graph = [] {
      GraphBuilder b("bound");
      auto x = b.input("x", DType::f32, sym_shape({-1, 16}, {"n", ""}));
      std::vector<float> w(16 * 16);
      for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 7) - 3) * 0.1f;
      auto h = b.relu(b.matmul(x, b.constant("w", HostTensor::from<float>(Shape{16, 16}, w))));
      b.output(b.add(h, x), "y");
      return b.build();
    };
    constexpr int64_t kMaxRows = 40;
    constexpr size_t kCapacity = 4;
    std::mt19937 rng(11);
    // What one plan of the largest signature holds (constants, arena, inputs) on a fresh context.
    uint64_t per_plan = 0;
    {
      auto ctx = Context::create();
      uint64_t base = ctx->pool(0).stats().live_bytes;
      ModelOptions one;
      one.plan_cache = 1;
      auto m = Model::create(ctx, graph(), one);
      auto s = m->session();
      s->run({{"x", random_tensor(Shape{kMaxRows, 16}, rng)}});
      per_plan = ctx->pool(0).stats().live_bytes - base;
    }
    REQUIRE(per_plan > 0);
    auto ctx = Context::create();
    uint64_t base = ctx->pool(0).stats().live_bytes;
    ModelOptions mo;
    mo.plan_cache = kCapacity;
    Graph g = graph();
    auto m = Model::create(ctx, g, mo);
    auto s = m->session();
    const float* w = g.initializers.at("w").as<float>();
    uint64_t most = 0;
    for (int call = 0; call < 10000; ++call) {
      int64_t rows = 1 + int64_t(rng() % kMaxRows);
      HostTensor x = random_tensor(Shape{rows, 16}, rng);
      auto out = s->run({{"x", x}});
      uint64_t live = ctx->pool(0).stats().live_bytes - base;
      most = std::max(most, live);
      if (live > kCapacity * per_plan) FAIL("call " << call << ": " << live << " bytes live, bound " << kCapacity * per_plan);
      if (call % 997 == 0) {
        std::vector<float> want(size_t(rows * 16));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t o = 0; o < 16; ++o) {
            double acc = 0;
            for (int64_t k = 0; k < 16; ++k) acc += double(x.as<float>()[r * 16 + k]) * w[k * 16 + o];
            want[size_t(r * 16 + o)] = float(std::max(acc, 0.0) + x.as<float>()[r * 16 + o]);
          }
        check_close(out.at("y"), want, 1e-5f);
      }
    }
    auto st = m->plan_cache_stats();
    CHECK(st.plans == kCapacity);
    CHECK(st.evictions == st.misses - kCapacity);
    CHECK(st.hits + st.misses == 10000);
    MESSAGE("10000 calls: " << st.misses << " plans made, " << st.hits << " hits; most device bytes live " << most
                            << " (bound " << kCapacity * per_plan << ")");
    // Shrinking the cache frees the evicted plans once the session drops them.
    m->set_plan_cache(1);
    s->run({{"x", random_tensor(Shape{kMaxRows, 16}, rng)}});
    CHECK(ctx->pool(0).stats().live_bytes - base <= per_plan);
  }

  TEST_CASE("one model, two threads, two shapes at once") {
    Graph g = encoder_graph();
    auto m = Model::create(test::shared_ctx(), g);
    std::atomic<int> bad{0};
    auto work = [&](int64_t batch, int64_t seq, uint32_t seed) {
      auto s = m->session();
      std::mt19937 rng(seed);
      for (int i = 0; i < 15; ++i) {
        HostTensor x = random_tensor(Shape{batch, seq, kIn}, rng);
        auto y = s->run({{"x", x}}).at("y");
        auto want = encoder_ref(g, x);
        for (size_t k = 0; k < want.size(); ++k)
          if (std::fabs(y.as<float>()[k] - want[k]) > 1e-5f) {
            ++bad;
            break;
          }
      }
    };
    std::thread t1(work, 2, 7, 1u), t2(work, 3, 11, 2u);
    t1.join();
    t2.join();
    CHECK(bad == 0);
    CHECK(m->plan_cache_stats().misses == 2);
  }
}

#include <optional>

namespace {
// A branch: one node `op` on outer-scope `x` (with an initializer of its own when `k` is given).
SubGraph branch(const std::string& name, const std::string& op, const std::string& x, std::optional<float> k = {}) {
  auto g = std::make_shared<Graph>();
  g->name = name;
  Node n;
  n.name = name + "_op";
  n.op_type = op;
  n.inputs = {x};
  if (k) {
    g->initializers[name + "_k"] = HostTensor::from<float>(Shape{1}, std::vector<float>{*k});
    n.inputs.push_back(name + "_k");
  }
  n.outputs = {name + "_out"};
  g->nodes.push_back(n);
  g->outputs.push_back(ValueInfo{name + "_out", DType::f32, ValueShape{}});
  g->outputs.back().shape.known = false;
  return g;
}
}  // namespace

TEST_SUITE("dynamic shapes") {
  TEST_CASE("If: a condition from a graph input or from shapes picks its branch per plan") {
    GraphBuilder b("if", 13);
    auto x = b.input("x", DType::f32, sym_shape({-1, 3}, {"n", ""}));
    auto flag = b.input("flag", DType::boolean, Shape{});
    // flag ? x * 2 : x + 0.5
    auto first = b.op("If", {flag}, {{"then_branch", branch("times", "Mul", x.name, 2.f)},
                                     {"else_branch", branch("plus", "Add", x.name, 0.5f)}})[0];
    // rows > 2 ? relu(first) : neg(first), the condition from Shape(x)
    auto rows = b.op1("Gather", {b.op1("Shape", {x}), b.constant("zero", HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{0}))});
    auto big = b.op1("Greater", {rows, b.constant("two", HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{2}))});
    auto second = b.op("If", {big}, {{"then_branch", branch("relu", "Relu", first.name)},
                                     {"else_branch", branch("neg", "Neg", first.name)}})[0];
    b.output(second, "y");
    auto m = Model::create(test::shared_ctx(), b.build());
    CHECK(m->shape_inputs() == std::vector<std::string>{"flag"});
    auto s = m->session();
    std::mt19937 rng(8);
    for (int64_t n : {1, 4, 2, 5})
      for (bool f : {true, false}) {
        CAPTURE(n);
        CAPTURE(f);
        HostTensor xv = random_tensor(Shape{n, 3}, rng);
        HostTensor fv(DType::boolean, Shape{});
        *static_cast<uint8_t*>(fv.data()) = f;
        auto y = s->run({{"x", xv}, {"flag", fv}}).at("y");
        std::vector<float> want(size_t(n * 3));
        for (size_t i = 0; i < want.size(); ++i) {
          float v = f ? xv.as<float>()[i] * 2.f : xv.as<float>()[i] + 0.5f;
          want[i] = n > 2 ? std::max(v, 0.f) : -v;
        }
        check_close(y, want, 0);
      }
    CHECK(m->plan_cache_stats().misses == 8);
  }

  TEST_CASE("If on a condition computed from run-time data: a staged plan reads it back") {
    GraphBuilder b("if_data", 13);
    auto x = b.input("x", DType::f32, Shape{3});
    auto c = b.op1("Greater", {b.op1("ReduceSum", {x}, {{"keepdims", int64_t(0)}}),
                               b.constant("zero", HostTensor::from<float>(Shape{}, std::vector<float>{0}))});
    b.output(b.op("If", {c}, {{"then_branch", branch("a", "Relu", x.name)}, {"else_branch", branch("b", "Neg", x.name)}})[0], "y");
    b.output(c, "positive");
    auto m = Model::create(test::shared_ctx(), b.build());
    REQUIRE(m->preplanned() != nullptr);
    CHECK(m->preplanned()->rest != nullptr);
    CHECK(m->preplanned()->rest_reason.find("computed from run-time data") != std::string::npos);
    auto s = m->session();
    for (std::vector<float> xs : {std::vector<float>{1, -2, 3}, std::vector<float>{-1, -2, 0.5f}, std::vector<float>{2, 2, -1}}) {
      auto out = s->run({{"x", HostTensor::from<float>(Shape{3}, xs)}});
      bool pos = xs[0] + xs[1] + xs[2] > 0;
      CHECK(out.at("positive").as<bool>()[0] == pos);
      std::vector<float> want(3);
      for (int i = 0; i < 3; ++i) want[size_t(i)] = pos ? std::max(xs[size_t(i)], 0.f) : -xs[size_t(i)];
      check_close(out.at("y"), want, 0);
    }
    // The rest is planned once per value of the condition.
    CHECK(m->preplanned()->rest->plan_cache_stats().misses == 2);
  }
}

TEST_SUITE("dynamic shapes") {
  TEST_CASE("sequence values are lists of tensors while planning") {
    GraphBuilder b("seq", 13);
    auto x = b.input("x", DType::f32, sym_shape({-1, 3}, {"n", ""}));
    auto two = b.constant("two", HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{2}));
    auto last = b.constant("last", HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{-1}));
    auto seq = b.op1("SplitToSequence", {x, two}, {{"axis", int64_t(0)}});
    b.output(b.op1("SequenceLength", {seq}), "count");
    b.output(b.op1("SequenceAt", {seq, last}), "tail");
    auto head = b.op1("SequenceErase", {seq});
    b.output(b.op1("ConcatFromSequence", {head}, {{"axis", int64_t(0)}}), "head");
    b.output(b.op1("ConcatFromSequence", {seq}, {{"axis", int64_t(1)}, {"new_axis", int64_t(1)}}), "stacked");
    auto m = Model::create(test::shared_ctx(), b.build());
    auto s = m->session();
    std::mt19937 rng(9);
    for (int64_t n : {6, 5, 4}) {
      CAPTURE(n);
      HostTensor xv = random_tensor(Shape{n, 3}, rng);
      const float* xp = xv.as<float>();
      if (n % 2) {  // chunks of 2 and 1 rows do not stack: a plan error naming the node
        CHECK_THROWS_WITH(s->run({{"x", xv}}), doctest::Contains("ConcatFromSequence"));
        continue;
      }
      auto out = s->run({{"x", xv}});
      int64_t chunks = n / 2, tail_rows = 2;
      CHECK(out.at("count").as<int64_t>()[0] == chunks);
      REQUIRE(out.at("tail").shape() == Shape{tail_rows, 3});
      check_close(out.at("tail"), std::vector<float>(xp + (n - tail_rows) * 3, xp + n * 3), 0);
      REQUIRE(out.at("head").shape() == Shape{n - tail_rows, 3});
      check_close(out.at("head"), std::vector<float>(xp, xp + (n - tail_rows) * 3), 0);
      // Equal chunks stack: [2, chunks, 3], element (r, c, k) = x[2c + r, k].
      REQUIRE(out.at("stacked").shape() == Shape{2, chunks, 3});
      std::vector<float> want;
      for (int64_t r = 0; r < 2; ++r)
        for (int64_t c = 0; c < chunks; ++c)
          for (int64_t k = 0; k < 3; ++k) want.push_back(xp[(2 * c + r) * 3 + k]);
      check_close(out.at("stacked"), want, 0);
    }
  }
}

TEST_SUITE("dynamic shapes") {
  TEST_CASE("cldl run on a staged model runs every stage and prints the model's outputs") {
    // while.onnx: a while loop whose condition comes from run-time data (a staged plan); before, the CLI
    // ran the first stage only and printed its outputs.
    const std::string dir = std::string(CLDL_SOURCE_DIR) + "/tests/data/dynamic/while/";
    const std::string out_dir = test::temp_dir("staged-cli");
    std::string out;
    int rc = test::run_command(std::string(CLDL_CLI_PATH) + " run " + CLDL_SOURCE_DIR + "/tests/data/dynamic/while.onnx" +
                                   " --device " + test::device_spec() + " -i x=" + dir + "0_x.npy -o " + out_dir,
                               out);
    REQUIRE_MESSAGE(rc == 0, out);
    CHECK(out.find("staged") != std::string::npos);
    HostTensor got = graph::read_npy(out_dir + "/acc.npy"), want = graph::read_npy(dir + "0_acc.npy");
    REQUIRE(got.shape() == want.shape());
    CLDL_CHECK_CLOSE(got.as<float>(), want.as<float>(), size_t(want.numel()), 1e-4, 1e-5);
    std::filesystem::remove_all(out_dir);
  }
}

namespace {
// A value of unknown shape (subgraph inputs and outputs, sequence and optional graph values).
ValueInfo unknown_value(const std::string& name, bool sequence = false, bool optional = false) {
  ValueInfo v{name, DType::f32, ValueShape{}};
  v.shape.known = false;
  v.sequence = sequence;
  v.optional = optional;
  return v;
}
// Appends node `name` (op, inputs, one output) to g.
void add_node(Graph& g, const std::string& name, const std::string& op, std::vector<std::string> in,
              const std::string& out, std::map<std::string, AttrValue> attrs = {}) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(in);
  n.outputs = {out};
  n.attrs = std::move(attrs);
  g.nodes.push_back(std::move(n));
}
}  // namespace

TEST_SUITE("dynamic shapes") {
  TEST_CASE("sequence and optional inputs and outputs: a plan per length and presence") {
    // xs: a sequence of [r_i, 3] tensors; bias: an optional [3]. Outputs: the concatenation of xs, xs with
    // relu(bias) (or zeros, when bias is absent) appended, relu of every element (SequenceMap), whether
    // bias came, and bias itself as an optional.
    GraphBuilder b("seq_io", 17);
    auto xs = b.input("xs", DType::f32, sym_shape({-1, 3}, {"r", ""}));
    auto bias = b.input("bias", DType::f32, Shape{3});
    auto zeros = b.constant("zeros", HostTensor::from<float>(Shape{1, 3}, std::vector<float>{0, 0, 0}));
    auto one_by_three = b.constant("one_by_three", HostTensor::from<int64_t>(Shape{2}, std::vector<int64_t>{1, 3}));
    auto has = b.op1("OptionalHasElement", {bias});
    b.output(b.op1("ConcatFromSequence", {xs}, {{"axis", int64_t(0)}}), "cat");
    auto body = std::make_shared<Graph>();
    body->name = "relu_body";
    body->inputs.push_back(unknown_value("e"));
    add_node(*body, "relu_e", "Relu", {"e"}, "relu_e_out");
    body->outputs.push_back(unknown_value("relu_e_out"));
    b.output(b.op1("SequenceMap", {xs}, {{"body", SubGraph(body)}}), "relus");
    b.output(has, "has");
    Graph g = b.build();
    // The If picks relu(bias) or zeros by `has` (a plan-time constant), then the tail is appended.
    auto then_g = std::make_shared<Graph>();
    then_g->name = "then";
    add_node(*then_g, "get_bias", "OptionalGetElement", {"bias"}, "bias_t");
    add_node(*then_g, "bias_row", "Reshape", {"bias_t", one_by_three.name}, "bias_row_out");
    add_node(*then_g, "bias_relu", "Relu", {"bias_row_out"}, "bias_relu_out");
    then_g->outputs.push_back(unknown_value("bias_relu_out"));
    auto else_g = std::make_shared<Graph>();
    else_g->name = "else";
    add_node(*else_g, "zeros_id", "Identity", {zeros.name}, "zeros_out");
    else_g->outputs.push_back(unknown_value("zeros_out"));
    add_node(g, "pick", "If", {has.name}, "tail", {{"then_branch", SubGraph(then_g)}, {"else_branch", SubGraph(else_g)}});
    add_node(g, "append", "SequenceInsert", {"xs", "tail"}, "appended");
    g.outputs.push_back(unknown_value("appended", true));
    add_node(g, "bias_opt", "Identity", {"bias"}, "bias_out");
    g.outputs.push_back(unknown_value("bias_out", false, true));
    for (auto& in : g.inputs) {
      if (in.name == "xs") in.sequence = true, in.shape.known = false;
      if (in.name == "bias") in.optional = true;
    }
    for (auto& o : g.outputs)
      if (o.name == "relus") o.sequence = true, o.shape.known = false;

    auto m = Model::create(test::shared_ctx(), std::move(g));
    auto s = m->session();
    std::mt19937 rng(17);
    int calls = 0;
    for (std::vector<int64_t> rows : {std::vector<int64_t>{2}, {1, 4, 3}, {5, 1}, {1, 4, 3}}) {
      for (bool with_bias : {true, false}) {
        CAPTURE(rows.size());
        CAPTURE(with_bias);
        std::vector<HostTensor> items;
        std::vector<float> cat;
        for (int64_t r : rows) {
          items.push_back(random_tensor(Shape{r, 3}, rng));
          cat.insert(cat.end(), items.back().as<float>(), items.back().as<float>() + r * 3);
        }
        HostTensor bv = random_tensor(Shape{3}, rng);
        std::map<std::string, ModelValue> in{{"xs", ModelValue::sequence_of(items)}};
        in["bias"] = with_bias ? ModelValue::of(bv) : ModelValue::none();
        auto out = s->run_values(in);
        ++calls;
        REQUIRE(out.at("cat").kind == ModelValue::Kind::tensor);
        check_close(out.at("cat").tensor, cat, 0);
        CHECK(out.at("has").tensor.as<bool>()[0] == with_bias);
        const ModelValue& app = out.at("appended");
        REQUIRE(app.kind == ModelValue::Kind::sequence);
        REQUIRE(app.items.size() == rows.size() + 1);
        for (size_t k = 0; k < rows.size(); ++k)
          check_close(app.items[k], std::vector<float>(items[k].as<float>(), items[k].as<float>() + rows[k] * 3), 0);
        std::vector<float> tail(3, 0.f);
        if (with_bias)
          for (int k = 0; k < 3; ++k) tail[size_t(k)] = std::max(bv.as<float>()[k], 0.f);
        REQUIRE(app.items.back().shape() == Shape{1, 3});
        check_close(app.items.back(), tail, 0);
        const ModelValue& relus = out.at("relus");
        REQUIRE(relus.kind == ModelValue::Kind::sequence);
        REQUIRE(relus.items.size() == rows.size());
        for (size_t k = 0; k < rows.size(); ++k) {
          std::vector<float> want(items[k].as<float>(), items[k].as<float>() + rows[k] * 3);
          for (auto& v : want) v = std::max(v, 0.f);
          check_close(relus.items[k], want, 0);
        }
        const ModelValue& bo = out.at("bias_out");
        if (with_bias) {
          REQUIRE(bo.kind == ModelValue::Kind::tensor);
          check_close(bo.tensor, std::vector<float>(bv.as<float>(), bv.as<float>() + 3), 0);
        } else {
          CHECK(bo.kind == ModelValue::Kind::none);
        }
      }
    }
    // One plan per (element shapes, bias present) signature: the repeated lengths hit the cache.
    CHECK(m->plan_cache_stats().misses == 6);
    CHECK(calls == 8);

    // Errors name the input and what was expected; the session goes on.
    HostTensor t = random_tensor(Shape{2, 3}, rng);
    CHECK_THROWS_WITH(s->run_values({{"xs", ModelValue::of(t)}}), doctest::Contains("input 'xs': expected a sequence"));
    CHECK_THROWS_WITH(s->run_values({{"xs", ModelValue::sequence_of({HostTensor::from<int64_t>(Shape{1, 3}, std::vector<int64_t>{1, 2, 3})})}}),
                      doctest::Contains("input 'xs' element 0: expected f32"));
    CHECK_THROWS_WITH(s->run_values({{"xs", ModelValue::sequence_of({})}}), doctest::Contains("empty sequence"));
    CHECK_THROWS_WITH(s->run({{"bias", t}}), doctest::Contains("run_values"));
    auto again = s->run_values({{"xs", ModelValue::sequence_of({t})}, {"bias", ModelValue::none()}});
    CHECK(again.at("appended").items.size() == 2);

    // The sequence and optional types survive an export and a re-import; the CLI and the C API, which
    // take tensors only, refuse such a model naming the value.
    Graph h;
    h.name = "seq_export";
    h.opsets[""] = 17;
    h.inputs = {unknown_value("xs", true), ValueInfo{"t", DType::f32, ValueShape(Shape{1, 3})}, unknown_value("o", false, true)};
    h.inputs.back().shape = ValueShape(Shape{3});
    add_node(h, "append", "SequenceInsert", {"xs", "t"}, "ys");
    add_node(h, "has", "OptionalHasElement", {"o"}, "has_o");
    h.outputs = {unknown_value("ys", true), ValueInfo{"has_o", DType::boolean, ValueShape(Shape{})}};
    const std::string path = test::temp_dir("seq_io") + "/seq_io.onnx";
    export_onnx_file(h, path);
    auto m2 = Model::create(test::shared_ctx(), import_onnx_file(path));
    HostTensor row = random_tensor(Shape{1, 3}, rng);
    auto o2 = m2->session()->run_values({{"xs", ModelValue::sequence_of({t, t})}, {"t", ModelValue::of(row)}});
    REQUIRE(o2.at("ys").items.size() == 3);
    check_close(o2.at("ys").items[1], std::vector<float>(t.as<float>(), t.as<float>() + 6), 0);
    check_close(o2.at("ys").items[2], std::vector<float>(row.as<float>(), row.as<float>() + 3), 0);
    CHECK(o2.at("has_o").tensor.as<bool>()[0] == false);
    std::string output;
    CHECK(test::run_command(std::string(CLDL_CLI_PATH) + " run " + path + " --random", output) != 0);
    CHECK_MESSAGE(output.find("input 'xs' is a sequence of tensors") != std::string::npos, output);
    cldl_context cctx = nullptr;
    REQUIRE(cldl_context_create("", &cctx) == CLDL_OK);
    cldl_model cm = nullptr;
    CHECK(cldl_model_load(cctx, path.c_str(), nullptr, &cm) == CLDL_ERROR_MODEL);
    CHECK(std::string(cldl_last_error()).find("is a sequence or optional value") != std::string::npos);
    cldl_context_release(cctx);
  }
}

TEST_SUITE("dynamic shapes") {
  TEST_CASE("Scan of opset 8: a batch axis, sequence_lens and directions") {
    // Body: s' = s + x (the state), y = s' * x (a scan output). Opset 8: states [B, D], scan inputs
    // [B, T, D]; the second scan input runs in reverse.
    auto body = std::make_shared<Graph>();
    body->name = "scan8_body";
    for (const char* v : {"s", "x", "z"}) body->inputs.push_back(unknown_value(v));
    add_node(*body, "add", "Add", {"s", "x"}, "s_next");
    add_node(*body, "mul", "Mul", {"s_next", "z"}, "y");
    for (const char* v : {"s_next", "y"}) body->outputs.push_back(unknown_value(v));
    std::mt19937 rng(8);
    for (auto [B, T, D] : {std::tuple<int64_t, int64_t, int64_t>{3, 5, 7}, {1, 1, 2}, {2, 9, 1}}) {
      CAPTURE(B);
      CAPTURE(T);
      GraphBuilder b("scan8", 8);
      auto lens = b.input("lens", DType::i64, Shape{B});
      auto s0 = b.input("s0", DType::f32, Shape{B, D});
      auto x = b.input("x", DType::f32, Shape{B, T, D});
      auto z = b.input("z", DType::f32, Shape{B, T, D});
      auto outs = b.op("Scan", {lens, s0, x, z},
                       {{"body", SubGraph(body)}, {"num_scan_inputs", int64_t(2)},
                        {"directions", std::vector<int64_t>{0, 1}}},
                       2);
      b.output(outs[0], "s_final");
      b.output(outs[1], "ys");
      auto m = Model::create(test::shared_ctx(), b.build());
      HostTensor S = random_tensor(Shape{B, D}, rng), X = random_tensor(Shape{B, T, D}, rng),
                 Z = random_tensor(Shape{B, T, D}, rng);
      HostTensor L = HostTensor::from<int64_t>(Shape{B}, std::vector<int64_t>(size_t(B), T));
      auto out = m->session()->run({{"lens", L}, {"s0", S}, {"x", X}, {"z", Z}});
      std::vector<float> s_final, ys(size_t(B * T * D));
      for (int64_t bi = 0; bi < B; ++bi) {
        std::vector<float> s(S.as<float>() + bi * D, S.as<float>() + (bi + 1) * D);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < D; ++d) {
            s[size_t(d)] += X.as<float>()[(bi * T + t) * D + d];
            ys[size_t((bi * T + t) * D + d)] = s[size_t(d)] * Z.as<float>()[(bi * T + (T - 1 - t)) * D + d];
          }
        s_final.insert(s_final.end(), s.begin(), s.end());
      }
      REQUIRE(out.at("s_final").shape() == Shape{B, D});
      check_close(out.at("s_final"), s_final);
      REQUIRE(out.at("ys").shape() == Shape{B, T, D});
      check_close(out.at("ys"), ys);
      if (T > 1) {  // a shorter sequence is refused, naming the node
        L.as<int64_t>()[0] = T - 1;
        CHECK_THROWS_WITH(m->session()->run({{"lens", L}, {"s0", S}, {"x", X}, {"z", Z}}),
                          doctest::Contains("sequence_lens holds"));
      }
    }
  }
}

TEST_SUITE("dynamic shapes") {
  TEST_CASE("a while Loop on run-time data with scan outputs: the iterations before each stop are stacked first") {
    // while sum(x) > 1: x = x * 0.5, collecting each x (a scan output). Every condition is run-time data,
    // so each iteration ends a stage and the rest continues the Loop, carrying the scan values so far.
    auto body = std::make_shared<Graph>();
    body->name = "halve";
    body->inputs = {ValueInfo{"i", DType::i64, ValueShape(Shape{})}, ValueInfo{"c", DType::boolean, ValueShape(Shape{})},
                    unknown_value("xi")};
    body->initializers["half"] = HostTensor::from<float>(Shape{}, std::vector<float>{0.5f});
    body->initializers["one"] = HostTensor::from<float>(Shape{}, std::vector<float>{1.0f});
    add_node(*body, "mul", "Mul", {"xi", "half"}, "xn");
    add_node(*body, "sum", "ReduceSum", {"xn"}, "s", {{"keepdims", int64_t(0)}});
    add_node(*body, "more", "Greater", {"s", "one"}, "c_out");
    add_node(*body, "collect", "Identity", {"xn"}, "scan_v");
    body->outputs = {ValueInfo{"c_out", DType::boolean, ValueShape(Shape{})}, unknown_value("xn"), unknown_value("scan_v")};
    GraphBuilder b("while_scan", 13);
    auto x = b.input("x", DType::f32, sym_shape({-1}, {"n"}));
    auto c0 = b.op1("Greater", {b.op1("ReduceSum", {x}, {{"keepdims", int64_t(0)}}),
                                b.constant("one0", HostTensor::from<float>(Shape{}, std::vector<float>{1.0f}))});
    Graph g = b.build();
    add_node(g, "loop", "Loop", {"", c0.name, "x"}, "x_final", {{"body", SubGraph(body)}});
    g.nodes.back().outputs.push_back("xs");
    g.outputs = {ValueInfo{"x_final", DType::f32, sym_shape({-1}, {"n"})}, ValueInfo{"xs", DType::f32, ValueShape{}}};
    g.outputs.back().shape.known = false;
    auto m = Model::create(test::shared_ctx(), std::move(g));
    auto s = m->session();
    for (std::vector<float> xv : {std::vector<float>{1, 2, 3, 4, 5}, std::vector<float>{0.75f, 0.5f}, std::vector<float>{3, 0, 1}}) {
      CAPTURE(xv.size());
      std::vector<float> cur = xv, stacked;
      int iterations = 0;
      auto sum = [](const std::vector<float>& v) { double t = 0; for (float f : v) t += f; return t; };
      while (sum(cur) > 1) {
        for (auto& f : cur) f *= 0.5f;
        stacked.insert(stacked.end(), cur.begin(), cur.end());
        ++iterations;
      }
      const int64_t n = int64_t(xv.size());
      auto out = s->run({{"x", HostTensor::from<float>(Shape{n}, xv)}});
      REQUIRE(out.at("xs").shape() == Shape{iterations, n});
      check_close(out.at("xs"), stacked, 0);
      check_close(out.at("x_final"), cur, 0);
    }
  }
}
