// Graph IR, builder, passes, memory plan and executor (Gemm / MatMul / view ops), against a plain C++
// GEMM reference. Tolerance: rtol 1e-4, atol 1e-5 (fp32 GEMM with K <= 64).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <thread>

#include "models/memory_plan.hpp"
#include "tests/reference/conv_ref.hpp"
#include "runtime/profiler.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;
using cldl::test::gemm_ref;

namespace {
const double kRtol = 1e-4, kAtol = 1e-5;

HostTensor rnd(Shape s, uint32_t seed) { return test::random_tensor(std::move(s), seed); }

// The MLP of the builder example: x[5,13] -> dense(7) -> matmul [7,3] -> reshape [3,5].
Graph mlp(const HostTensor& w1, const HostTensor& b1, const HostTensor& w2) {
  GraphBuilder b("mlp");
  auto x = b.input("x", DType::f32, Shape{5, 13});
  auto h = b.dense(x, b.constant("w1", w1), b.constant("b1", b1));
  auto y = b.matmul(h, b.constant("w2", w2));
  b.output(b.reshape(y, {3, 5}), "y");
  return b.build();
}

std::vector<float> mlp_ref(const HostTensor& x, const HostTensor& w1, const HostTensor& b1, const HostTensor& w2) {
  auto h = gemm_ref(x.as<float>(), w1.as<float>(), 5, 7, 13, false, true);
  for (int m = 0; m < 5; ++m)
    for (int n = 0; n < 7; ++n) h[size_t(m * 7 + n)] += b1.as<float>()[n];
  return gemm_ref(h.data(), w2.as<float>(), 5, 3, 7);
}
}  // namespace

TEST_SUITE("graph") {
  TEST_CASE("builder MLP runs Gemm (fused bias), MatMul and Reshape as a view") {
    auto w1 = rnd({7, 13}, 1), b1 = rnd({7}, 2), w2 = rnd({7, 3}, 3), x = rnd({5, 13}, 4);
    auto out = test::run_graph(mlp(w1, b1, w2), {{"x", x}});
    REQUIRE(out.count("y"));
    CHECK(out["y"].shape() == Shape{3, 5});
    auto want = mlp_ref(x, w1, b1, w2);
    CLDL_CHECK_CLOSE(out["y"].as<float>(), want.data(), want.size(), kRtol, kAtol);
  }

  TEST_CASE("builder reads like a CNN and the graph is sorted") {
    GraphBuilder b("cnn");
    auto x = b.input("image", DType::f32, Shape{1, 3, 7, 13});
    auto c1 = b.relu(b.conv(x, b.constant("k1", rnd({5, 3, 3, 3}, 1)), b.constant("c1b", rnd({5}, 2))));
    auto p1 = b.max_pool(c1, {2, 2}, {2, 2});
    auto f = b.flatten(p1);
    b.output(b.softmax(b.dense(f, b.constant("fc", rnd({10, 50}, 3)), b.constant("fcb", rnd({10}, 4)))), "probs");
    Graph g = b.build();
    REQUIRE(g.nodes.size() == 7);
    CHECK(g.nodes.front().op_type == "Conv");
    CHECK(g.nodes.back().op_type == "Identity");
    // Conv, Relu, MaxPool and Softmax are registered by their families (models/ops_*.cpp).
    prepare(g);
    CHECK(g.info("probs")->shape.to_shape() == Shape{1, 10});
  }

  TEST_CASE("Gemm: alpha, beta, transposes and every C broadcast") {
    const int64_t M = 5, N = 7, K = 3;
    struct Case { Shape c; float alpha, beta; bool ta, tb; };
    for (auto cs : {Case{{}, 1, 1, false, false}, Case{{1}, 0.5f, 2, false, true}, Case{{N}, 1, 1, true, false},
                    Case{{1, N}, 1, 0.25f, false, false}, Case{{M, 1}, 2, 1, true, true}, Case{{M, N}, 1, -1, false, false},
                    Case{{M, N}, 1, 0, false, false}}) {
      CAPTURE(cs.c.str());
      CAPTURE(cs.beta);
      auto a = rnd(cs.ta ? Shape{K, M} : Shape{M, K}, 5), bm = rnd(cs.tb ? Shape{N, K} : Shape{K, N}, 6), c = rnd(cs.c, 7);
      GraphBuilder b;
      b.output(b.gemm(b.input("a", DType::f32, a.shape()), b.input("b", DType::f32, bm.shape()),
                      b.input("c", DType::f32, c.shape()), cs.alpha, cs.beta, cs.ta, cs.tb),
               "y");
      auto out = test::run_graph(b.build(), {{"a", a}, {"b", bm}, {"c", c}});
      auto want = gemm_ref(a.as<float>(), bm.as<float>(), M, N, K, cs.ta, cs.tb, cs.alpha);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          int64_t cm = cs.c.rank() == 2 ? cs.c[0] : 1, cn = cs.c.rank() ? cs.c[cs.c.rank() - 1] : 1;
          want[size_t(m * N + n)] += cs.beta * c.as<float>()[(cm == 1 ? 0 : m) * cn + (cn == 1 ? 0 : n)];
        }
      CLDL_CHECK_CLOSE(out["y"].as<float>(), want.data(), want.size(), kRtol, kAtol);
    }
  }

  TEST_CASE("MatMul: 1-D operands, batches, stride-0 and mixed broadcast") {
    struct Case { Shape a, b, y; };
    for (auto cs : {Case{{13}, {13, 3}, {3}}, Case{{5, 13}, {13}, {5}}, Case{{2, 3, 5, 4}, {4, 6}, {2, 3, 5, 6}},
                    Case{{3, 5, 4}, {3, 4, 6}, {3, 5, 6}}, Case{{5, 4}, {3, 4, 6}, {3, 5, 6}},
                    Case{{2, 1, 5, 4}, {1, 3, 4, 6}, {2, 3, 5, 6}}}) {
      CAPTURE(cs.a.str());
      CAPTURE(cs.b.str());
      auto a = rnd(cs.a, 8), bm = rnd(cs.b, 9);
      GraphBuilder b;
      b.output(b.matmul(b.input("a", DType::f32, a.shape()), b.input("b", DType::f32, bm.shape())), "y");
      auto out = test::run_graph(b.build(), {{"a", a}, {"b", bm}});
      REQUIRE(out["y"].shape() == cs.y);
      // Reference: broadcast batches by hand.
      Shape A = cs.a, B = cs.b;
      if (A.rank() == 1) A.dims.insert(A.dims.begin(), 1);
      if (B.rank() == 1) B.dims.push_back(1);
      int64_t M = A[A.rank() - 2], K = A[A.rank() - 1], N = B[B.rank() - 1];
      size_t r = std::max(A.rank(), B.rank()) - 2;
      std::vector<int64_t> ab(r, 1), bb(r, 1), yb(r, 1);
      for (size_t i = 0; i < r; ++i) {
        if (i + A.rank() - 2 >= r) ab[i] = A[i + A.rank() - 2 - r];
        if (i + B.rank() - 2 >= r) bb[i] = B[i + B.rank() - 2 - r];
        yb[i] = std::max(ab[i], bb[i]);
      }
      int64_t nb = 1;
      for (auto d : yb) nb *= d;
      std::vector<float> want;
      for (int64_t i = 0; i < nb; ++i) {
        int64_t ia = 0, ib = 0, rem = i, ma = 1, mb = 1;
        for (int64_t ax = int64_t(r) - 1; ax >= 0; --ax) {
          int64_t co = rem % yb[ax];
          rem /= yb[ax];
          ia += (ab[ax] == 1 ? 0 : co) * ma;
          ib += (bb[ax] == 1 ? 0 : co) * mb;
          ma *= ab[ax];
          mb *= bb[ax];
        }
        auto y = gemm_ref(a.as<float>() + ia * M * K, bm.as<float>() + ib * K * N, M, N, K);
        want.insert(want.end(), y.begin(), y.end());
      }
      CLDL_CHECK_CLOSE(out["y"].as<float>(), want.data(), want.size(), kRtol, kAtol);
    }
  }

  TEST_CASE("passes: shape subgraph folded on the host, dead nodes removed") {
    GraphBuilder b;
    auto x = b.input("x", DType::f32, Shape{2, 3, 5});
    auto shape = b.op1("Shape", {x});
    auto first = b.op1("Gather", {shape, b.constant("i0", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{0}))});
    auto cat = b.op1("Concat", {first, b.constant("m1", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{-1}))},
                     {{"axis", int64_t(0)}});
    auto flat = b.op1("Reshape", {x, cat});
    b.op1("Relu", {x});  // dead: reaches no output
    b.output(b.matmul(flat, b.constant("w", rnd({15, 4}, 3))), "y");
    Graph g = b.build();
    auto stats = prepare(g);
    CHECK(stats.folded_nodes == 3);
    CHECK(stats.removed_dead == 1);
    REQUIRE(g.nodes.size() == 3);  // Reshape, MatMul and the Identity naming the output
    CHECK(g.nodes[0].op_type == "Reshape");
    CHECK(g.info(g.nodes[0].outputs[0])->shape.to_shape() == Shape{2, 15});
    CHECK(g.info("y")->shape.to_shape() == Shape{2, 4});
  }

  TEST_CASE("memory plan reuses bytes of dead intermediates and never overlaps live ones") {
    GraphBuilder b;
    auto v = b.input("x", DType::f32, Shape{8, 16});
    auto w = b.constant("w", rnd({16, 16}, 1));
    for (int i = 0; i < 6; ++i) v = b.matmul(v, w);
    b.output(v, "y");
    Graph g = b.build();
    prepare(g);
    auto plan = plan_memory(g);
    CHECK(plan.total_bytes == 6 * 8 * 16 * 4);
    CHECK(plan.arena_bytes <= 2 * 8 * 16 * 4);
    for (auto& [a, s] : plan.slots)
      for (auto& [c, t] : plan.slots) {
        if (a == c) continue;
        bool alive_together = s.first <= t.last && t.first <= s.last;
        bool overlap = s.offset < t.offset + t.bytes && t.offset < s.offset + s.bytes;
        CHECK_FALSE((alive_together && overlap));
      }
    // And the chain still computes the right thing with reuse.
    auto x = rnd({8, 16}, 2);
    auto out = test::run_graph(g, {{"x", x}});
    std::vector<float> want(x.as<float>(), x.as<float>() + 128);
    for (int i = 0; i < 6; ++i) want = gemm_ref(want.data(), g.initializers.at("w").as<float>(), 8, 16, 16);
    CLDL_CHECK_CLOSE(out["y"].as<float>(), want.data(), want.size(), 1e-3, 1e-4);
  }

  TEST_CASE("independent branches go to different queues; two sessions on two threads agree") {
    GraphBuilder b;
    auto x = b.input("x", DType::f32, Shape{9, 11});
    auto l = b.matmul(x, b.constant("wl", rnd({11, 6}, 1)));
    auto r = b.matmul(x, b.constant("wr", rnd({11, 6}, 2)));
    b.output(b.gemm(l, r, {}, 1, 1, false, true), "y");  // [9,6] x [6,9]^T... = [9,9]
    Graph g = b.build();
    auto m = test::compile_graph(g, {}, CompileOptions{.queues = 2});
    std::set<int> queues;
    for (auto& line : m->describe()) queues.insert(line.find("queue 1") != std::string::npos);
    CHECK(queues.size() == 2);
    auto ref = [&](const HostTensor& xv) {
      auto lv = gemm_ref(xv.as<float>(), m->graph().initializers.at("wl").as<float>(), 9, 6, 11);
      auto rv = gemm_ref(xv.as<float>(), m->graph().initializers.at("wr").as<float>(), 9, 6, 11);
      return gemm_ref(lv.data(), rv.data(), 9, 9, 6, false, true);
    };
    std::atomic<int> bad{0};
    auto worker = [&](uint32_t seed) {
      auto s = m->session();
      for (int it = 0; it < 15; ++it) {
        auto xv = rnd({9, 11}, seed + it);
        auto out = s->run({{"x", xv}});
        auto want = ref(xv);
        if (test::compare(out["y"].as<float>(), want.data(), want.size(), 1e-4, 1e-4).mismatches) bad++;
      }
    };
    std::thread t1(worker, 100), t2(worker, 200);
    t1.join();
    t2.join();
    CHECK(bad == 0);
  }

  TEST_CASE("queues 0 (the default): one queue on a CPU device, two on others") {
    DeviceInfo cpu, gpu;
    cpu.type = DeviceType::cpu;
    gpu.type = DeviceType::gpu;
    CHECK(queues_for(CompileOptions{}, cpu) == 1);
    CHECK(queues_for(CompileOptions{}, gpu) == 2);
    CHECK(queues_for(CompileOptions{.queues = 3}, cpu) == 3);
    CHECK(queues_for(CompileOptions{.queues = 1}, gpu) == 1);
    // The branches of the graph above, compiled with the default options, on the test device.
    GraphBuilder b;
    auto x = b.input("x", DType::f32, Shape{9, 11});
    auto l = b.matmul(x, b.constant("wl", rnd({11, 6}, 1)));
    auto r = b.matmul(x, b.constant("wr", rnd({11, 6}, 2)));
    b.output(b.gemm(l, r, {}, 1, 1, false, true), "y");
    auto m = test::compile_graph(b.build(), {}, CompileOptions{});
    bool second = false;
    for (auto& line : m->describe()) second |= line.find("queue 1") != std::string::npos;
    CHECK(second == (test::shared_ctx()->device(0).info.type != DeviceType::cpu));
  }

  TEST_CASE("in-place Concat: inputs written into the output at batch 1, DenseNet-style chains nest, copies otherwise") {
    // a = Relu(x), f1 = Sigmoid(a), c1 = Concat(a, f1), f2 = Tanh(c1), c2 = Concat(a, f1, f2) (chained to
    // Concat(c1, f2)), y = -c2; and two branches on two queues, z = -Concat(Relu(x), Sigmoid(x)).
    auto build = [](int64_t N) {
      GraphBuilder b;
      auto x = b.input("x", DType::f32, Shape{N, 4, 8, 8});
      auto a = b.relu(x);
      auto f1 = b.op1("Sigmoid", {a});
      auto c1 = b.op1("Concat", {a, f1}, {{"axis", int64_t(1)}});
      auto f2 = b.op1("Tanh", {c1});
      auto c2 = b.op1("Concat", {a, f1, f2}, {{"axis", int64_t(1)}});
      b.output(b.op1("Neg", {c2}), "y");
      auto u = b.relu(x), v = b.op1("Sigmoid", {x});
      b.output(b.op1("Neg", {b.op1("Concat", {u, v}, {{"axis", int64_t(-3)}})}), "z");
      return b.build();
    };
    auto reference = [](const HostTensor& xt, int64_t N) {
      const float* x = xt.as<float>();
      const int64_t P = 4 * 64;  // one image's floats per part of 4 channels
      std::vector<float> y(size_t(N * 16 * 64)), z(size_t(N * 8 * 64));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < P; ++i) {
          const float xv = x[n * P + i], a = std::max(xv, 0.0f), f1 = 1.0f / (1.0f + std::exp(-a));
          float* yn = y.data() + n * 16 * 64;
          yn[i] = -a, yn[P + i] = -f1, yn[2 * P + i] = -std::tanh(a), yn[3 * P + i] = -std::tanh(f1);
          float* zn = z.data() + n * 8 * 64;
          zn[i] = -a, zn[P + i] = -1.0f / (1.0f + std::exp(-xv));
        }
      return std::make_pair(y, z);
    };
    for (int64_t N : {1, 2}) {
      INFO("batch " << N);
      auto m = test::compile_graph(build(N), {}, CompileOptions{.queues = 2});
      int in_place = 0, concats = 0;
      for (auto& line : m->describe()) {
        in_place += line.find("in place") != std::string::npos;
        concats += line.find("Concat") != std::string::npos;
      }
      CHECK(concats == 3);
      CHECK(in_place == (N == 1 ? 3 : 0));  // at batch 2 a part is not one block of the output
      auto s = m->session();
      for (uint32_t seed : {5u, 6u}) {
        auto x = rnd({N, 4, 8, 8}, seed);
        auto out = s->run({{"x", x}});
        auto [y, z] = reference(x, N);
        CLDL_CHECK_CLOSE(out["y"].as<float>(), y.data(), y.size(), 1e-5, 1e-6);
        CLDL_CHECK_CLOSE(out["z"].as<float>(), z.data(), z.size(), 1e-5, 1e-6);
      }
    }
    // An input at an offset that is not a multiple of 16 bytes (3 channels of 1x5 floats: 60 bytes, then 7
    // channels) is copied in.
    GraphBuilder b;
    auto x = b.input("x", DType::f32, Shape{1, 3, 1, 5});
    auto w = b.input("w", DType::f32, Shape{1, 7, 1, 5});
    b.output(b.op1("Neg", {b.op1("Concat", {b.relu(x), b.relu(w)}, {{"axis", int64_t(1)}})}), "y");
    // A Concat that is a graph output is in place too (bound to a buffer of the app's, its parts are written
    // there: tests/test_concat_bound_output.cpp).
    auto x2 = b.input("x2", DType::f32, Shape{1, 4, 8, 8});
    b.output(b.op1("Concat", {b.relu(x2), b.op1("Sigmoid", {x2})}, {{"axis", int64_t(1)}}), "z");
    auto m = test::compile_graph(b.build());
    int copied = 0, whole = 0;
    for (auto& line : m->describe()) {
      copied += line.find("in place, 1 input(s) copied in") != std::string::npos;
      whole += line.find("in place (inputs written") != std::string::npos;
    }
    CHECK(copied == 1);
    CHECK(whole == 1);
    {
      auto x2v = rnd({1, 4, 8, 8}, 11);
      auto o = m->session()->run({{"x", rnd({1, 3, 1, 5}, 12)}, {"w", rnd({1, 7, 1, 5}, 13)}, {"x2", x2v}});
      std::vector<float> want(512);
      for (int i = 0; i < 256; ++i) {
        const float v = x2v.as<float>()[i];
        want[size_t(i)] = std::max(v, 0.0f), want[size_t(256 + i)] = 1.0f / (1.0f + std::exp(-v));
      }
      CLDL_CHECK_CLOSE(o["z"].as<float>(), want.data(), want.size(), 1e-6, 1e-6);
    }

    // Parts 16 bytes apart but not 256 (3 channels of 4x4 floats: 192 bytes), written by a generated
    // element-wise kernel and by a convolution's vector epilogue.
    GraphBuilder b2;
    auto x3 = b2.input("x", DType::f32, Shape{1, 3, 4, 4});
    auto wc = b2.constant("w", rnd({3, 3, 3, 3}, 9));
    auto conv = b2.conv(x3, wc, {}, {1, 1}, {1, 1, 1, 1});
    b2.output(b2.op1("Neg", {b2.op1("Concat", {b2.op1("Sigmoid", {x3}), conv}, {{"axis", int64_t(1)}})}), "y");
    auto m2 = test::compile_graph(b2.build());
    int in_place = 0;
    for (auto& line : m2->describe()) in_place += line.find("in place") != std::string::npos;
    CHECK(in_place == 1);
    auto xv = rnd({1, 3, 4, 4}, 10);
    auto out = m2->session()->run({{"x", xv}});
    ref::ConvParams cp;
    cp.N = 1, cp.C = 3, cp.H = 4, cp.W = 4, cp.K = 3, cp.KH = 3, cp.KW = 3, cp.PT = cp.PL = cp.PB = cp.PR = 1;
    int64_t OH = 0, OW = 0;
    auto cv = ref::conv2d(cp, xv.as<float>(), m2->graph().initializers.at("w").as<float>(), nullptr, Activation{}, OH, OW);
    std::vector<float> want(96);
    for (int i = 0; i < 48; ++i) want[size_t(i)] = -1.0f / (1.0f + std::exp(-xv.as<float>()[i]));
    for (int i = 0; i < 48; ++i) want[size_t(48 + i)] = -cv[size_t(i)];
    CLDL_CHECK_CLOSE(out["y"].as<float>(), want.data(), want.size(), 1e-4, 1e-5);
  }

  TEST_CASE("in-place Slice and Split: views of their input at batch 1; a Concat copies in the inputs that are views") {
    // a = Relu(x) [N,6,4,4]; s = a[:, 2:5] (Slice); p0, p1, p2 = Split(a, [1, 2, 3]); y = Concat(-s, exp(p0),
    // tanh(p1), -p2); z = -Concat(p1, Sigmoid(x)): p1 is a view, so that Concat copies it in. Not in place:
    // a Slice with step 2, a Slice of the inner axis (not one block), and everything at batch 2.
    auto i64 = [](std::vector<int64_t> v) { return HostTensor::from<int64_t>(Shape{int64_t(v.size())}, v); };
    auto build = [&](int64_t N) {
      GraphBuilder b;
      auto x = b.input("x", DType::f32, Shape{N, 6, 4, 4});
      auto a = b.relu(x);
      auto s = b.op1("Slice", {a, b.constant("st", i64({2})), b.constant("en", i64({5})), b.constant("ax", i64({1}))});
      auto p = b.op("Split", {a, b.constant("sp", i64({1, 2, 3}))}, {{"axis", int64_t(1)}}, 3);
      auto one = int64_t(1);
      b.output(b.op1("Concat", {b.op1("Neg", {s}), b.op1("Exp", {p[0]}), b.op1("Tanh", {p[1]}), b.op1("Neg", {p[2]})},
                     {{"axis", one}}),
               "y");
      b.output(b.op1("Neg", {b.op1("Concat", {p[1], b.op1("Sigmoid", {x})}, {{"axis", one}})}), "z");
      auto step2 = b.op1("Slice", {a, b.constant("st2", i64({0})), b.constant("en2", i64({6})), b.constant("ax2", i64({1})),
                                   b.constant("sp2", i64({2}))});
      auto inner = b.op1("Slice", {a, b.constant("st3", i64({1})), b.constant("en3", i64({3})), b.constant("ax3", i64({2}))});
      b.output(b.op1("Neg", {step2}), "u");
      b.output(b.op1("Neg", {inner}), "v");
      return b.build();
    };
    for (int64_t N : {1, 2}) {
      INFO("batch " << N);
      auto m = test::compile_graph(build(N), {}, CompileOptions{.queues = 2});
      int views = 0, copied = 0;
      for (auto& line : m->describe()) {
        views += line.find("views of its input") != std::string::npos;
        copied += line.find("copied in") != std::string::npos;
      }
      CHECK(views == (N == 1 ? 2 : 0));   // the Slice [2:5] and the Split
      CHECK(copied == (N == 1 ? 1 : 0));  // z's Concat copies p1 in
      auto x = rnd({N, 6, 4, 4}, 31);
      auto out = m->session()->run({{"x", x}});
      const float* xv = x.as<float>();
      auto A = [&](int64_t n, int64_t c, int64_t i) { return std::max(xv[(n * 6 + c) * 16 + i], 0.0f); };
      std::vector<float> y, z, u, v;
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = 2; c < 5; ++c)
          for (int i = 0; i < 16; ++i) y.push_back(-A(n, c, i));
        for (int i = 0; i < 16; ++i) y.push_back(std::exp(A(n, 0, i)));
        for (int64_t c = 1; c < 3; ++c)
          for (int i = 0; i < 16; ++i) y.push_back(std::tanh(A(n, c, i)));
        for (int64_t c = 3; c < 6; ++c)
          for (int i = 0; i < 16; ++i) y.push_back(-A(n, c, i));
        for (int64_t c = 1; c < 3; ++c)
          for (int i = 0; i < 16; ++i) z.push_back(-A(n, c, i));
        for (int64_t c = 0; c < 6; ++c)
          for (int i = 0; i < 16; ++i) z.push_back(-1.0f / (1.0f + std::exp(-xv[(n * 6 + c) * 16 + i])));
        for (int64_t c = 0; c < 6; c += 2)
          for (int i = 0; i < 16; ++i) u.push_back(-A(n, c, i));
        for (int64_t c = 0; c < 6; ++c)
          for (int h = 1; h < 3; ++h)
            for (int w = 0; w < 4; ++w) v.push_back(-A(n, c, h * 4 + w));
      }
      CLDL_CHECK_CLOSE(out["y"].as<float>(), y.data(), y.size(), 1e-5, 1e-6);
      CLDL_CHECK_CLOSE(out["z"].as<float>(), z.data(), z.size(), 1e-5, 1e-6);
      CLDL_CHECK_CLOSE(out["u"].as<float>(), u.data(), u.size(), 1e-5, 1e-6);
      CLDL_CHECK_CLOSE(out["v"].as<float>(), v.data(), v.size(), 1e-5, 1e-6);
    }
  }

  TEST_CASE("a Transpose that moves only dims of size 1 becomes a Reshape (a view); others stay copies") {
    // [7, 1, 5] -> perm (1, 0, 2) -> [1, 7, 5]: a view. [1, 7, 5] -> perm (0, 2, 1) -> [1, 5, 7]: a copy.
    GraphBuilder b;
    auto x = b.input("x", DType::f32, Shape{7, 1, 5});
    auto r = b.relu(x);
    auto t1 = b.op1("Transpose", {r}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
    auto t2 = b.op1("Transpose", {t1}, {{"perm", std::vector<int64_t>{0, 2, 1}}});
    b.output(b.op1("Neg", {t2}), "y");
    b.output(b.op1("Neg", {t1}), "z");
    auto m = test::compile_graph(b.build());
    int transposes = 0, reshapes = 0;
    for (auto& line : m->describe()) {
      transposes += line.find(" Transpose ") != std::string::npos;
      reshapes += line.find(" Reshape ") != std::string::npos && line.find("view") != std::string::npos;
    }
    CHECK(transposes == 1);
    CHECK(reshapes == 1);
    auto xv = rnd({7, 1, 5}, 41);
    auto out = m->session()->run({{"x", xv}});
    std::vector<float> y(35), z(35);
    for (int i = 0; i < 7; ++i)
      for (int j = 0; j < 5; ++j) {
        const float a = std::max(xv.as<float>()[i * 5 + j], 0.0f);
        z[size_t(i * 5 + j)] = -a;  // [1, 7, 5]
        y[size_t(j * 7 + i)] = -a;  // [1, 5, 7]
      }
    CHECK(out["y"].shape() == Shape{1, 5, 7});
    CHECK(out["z"].shape() == Shape{1, 7, 5});
    CLDL_CHECK_CLOSE(out["y"].as<float>(), y.data(), y.size(), 1e-6, 1e-7);
    CLDL_CHECK_CLOSE(out["z"].as<float>(), z.data(), z.size(), 1e-6, 1e-7);
  }

  TEST_CASE("profiling records every kernel and writes a Chrome trace") {
    auto w1 = rnd({7, 13}, 1), b1 = rnd({7}, 2), w2 = rnd({7, 3}, 3);
    auto m = test::compile_graph(mlp(w1, b1, w2), {}, CompileOptions{.profiling = true});
    Profiler prof;
    m->session()->run({{"x", rnd({5, 13}, 4)}}, &prof);
    auto recs = prof.records();
    // Each GEMM node runs its main kernel once (plus packing kernels when the op chooses them).
    int gemm_node0 = 0, matmul_node1 = 0;
    for (auto& r : recs) {
      gemm_node0 += r.name.rfind("Gemm_0/gemm_tile", 0) == 0 || r.name.rfind("Gemm_0/gemm_clblast", 0) == 0;
      matmul_node1 += r.name.rfind("MatMul_1/gemm_tile", 0) == 0 || r.name.rfind("MatMul_1/gemm_clblast", 0) == 0;
      CHECK(r.end_ns >= r.start_ns);
    }
    CHECK(gemm_node0 == 1);
    CHECK(matmul_node1 == 1);
    std::string json = prof.chrome_trace_json();
    CHECK(json.find("Gemm_0/gemm") != std::string::npos);
    CHECK(json.find("MatMul_1/gemm") != std::string::npos);
  }

  TEST_CASE("bad graphs: cycle, undefined value, wrong input shape / dtype, unknown op") {
    {
      Graph g;
      g.opsets[""] = 17;
      g.inputs.push_back({"x", DType::f32, Shape{2, 2}});
      g.nodes.push_back({"a", "MatMul", "", {"x", "b_out"}, {"a_out"}, {}});
      g.nodes.push_back({"b", "MatMul", "", {"a_out", "x"}, {"b_out"}, {}});
      g.outputs.push_back({"b_out", DType::f32, Shape{2, 2}});
      auto msg = test::error_of([&] { prepare(g); });
      CHECK(msg.find("cycle") != std::string::npos);
      CHECK(msg.find("MatMul") != std::string::npos);
    }
    {
      GraphBuilder b;
      auto x = b.input("x", DType::f32, Shape{2, 3});
      b.output(b.matmul(x, Value{&b, "missing_weight"}), "y");
      auto msg = test::error_of([&] { b.build(); });
      CHECK(msg.find("missing_weight") != std::string::npos);
      CHECK(msg.find("MatMul_0") != std::string::npos);
    }
    {
      GraphBuilder b;
      b.output(b.matmul(b.input("x", DType::f32, Shape{2, 3}), b.constant("w", rnd({3, 4}, 1))), "y");
      auto m = test::compile_graph(b.build());
      auto s = m->session();
      auto msg = test::error_of([&] { s->run({{"x", rnd({3, 2}, 1)}}); });
      CHECK(msg.find("input 'x': expected f32 [2, 3], got f32 [3, 2]") != std::string::npos);
      msg = test::error_of([&] { s->run({{"x", HostTensor(DType::i32, Shape{2, 3})}}); });
      CHECK(msg.find("expected f32 [2, 3], got i32") != std::string::npos);
      msg = test::error_of([&] { s->run({}); });
      CHECK(msg.find("input 'x' (f32 [2, 3]) is missing") != std::string::npos);
    }
    {
      GraphBuilder b;
      b.output(b.op1("FancyNewOp", {b.input("x", DType::f32, Shape{2})}), "y");
      Graph g = b.build();
      auto msg = test::error_of([&] { prepare(g); });
      CHECK(msg.find("FancyNewOp_0") != std::string::npos);
      CHECK(msg.find("unsupported op 'FancyNewOp' (domain ai.onnx, opset 17)") != std::string::npos);
    }
    {
      GraphBuilder b;
      auto x = b.input("x", DType::f32, Shape{2, 3});
      b.output(b.matmul(x, b.constant("w", rnd({4, 4}, 1))), "y");
      Graph g = b.build();
      auto msg = test::error_of([&] { prepare(g); });
      CHECK(msg.find("MatMul_0") != std::string::npos);
      CHECK(msg.find("inner dimensions differ: [2, 3] x [4, 4]") != std::string::npos);
    }
  }

  TEST_CASE("symbolic dimensions are bound at prepare or named in the error") {
    ValueShape s;
    s.dims = {-1, 13};
    s.symbols = {"batch", ""};
    auto w1 = rnd({7, 13}, 1), b1 = rnd({7}, 2);
    GraphBuilder b;
    b.output(b.dense(b.input("x", DType::f32, s), b.constant("w1", w1), b.constant("b1", b1)), "y");
    Graph g = b.build();
    Graph g2 = g;
    auto msg = test::error_of([&] { prepare(g2); });
    CHECK(msg.find("'batch'") != std::string::npos);
    auto x = rnd({4, 13}, 3);
    auto out = test::run_graph(g, {{"x", x}}, PrepareOptions{.bind = {}, .dims = {{"batch", 4}}});
    CHECK(out["y"].shape() == Shape{4, 7});
  }

  TEST_CASE("fusion: BatchNorm folded into Gemm and Relu into its epilogue") {
    auto w = rnd({7, 13}, 1), bias = rnd({7}, 2), scale = rnd({7}, 3), shift = rnd({7}, 4), mean = rnd({7}, 5),
         var = test::random_tensor(Shape{7}, 6, 0.5f, 2.0f), x = rnd({5, 13}, 7);
    GraphBuilder b;
    auto in = b.input("x", DType::f32, x.shape());
    auto d = b.dense(in, b.constant("w", w), b.constant("b", bias));
    auto bn = b.op1("BatchNormalization", {d, b.constant("scale", scale), b.constant("shift", shift),
                                           b.constant("mean", mean), b.constant("var", var)},
                    {{"epsilon", 1e-3f}});
    b.output(b.relu(bn), "y");
    Graph g = b.build();
    auto stats = prepare(g);
    CHECK(stats.fused == 2);
    REQUIRE(g.nodes.size() == 2);  // Gemm (+BN, +Relu) and the Identity naming the output
    auto m = graph::CompiledModel::compile(test::shared_ctx(), g);
    CHECK(m->describe()[0].find("Relu fused") != std::string::npos);
    auto out = m->session()->run({{"x", x}});
    auto want = gemm_ref(x.as<float>(), w.as<float>(), 5, 7, 13, false, true);
    for (int i = 0; i < 5; ++i)
      for (int c = 0; c < 7; ++c) {
        float& v = want[size_t(i * 7 + c)];
        v = (v + bias.as<float>()[c] - mean.as<float>()[c]) / std::sqrt(var.as<float>()[c] + 1e-3f) * scale.as<float>()[c] +
            shift.as<float>()[c];
        v = std::max(v, 0.0f);
      }
    CLDL_CHECK_CLOSE(out["y"].as<float>(), want.data(), want.size(), 1e-4, 1e-5);
  }

  TEST_CASE("fusion: Conv + BatchNorm weights, and no fusion when the GEMM output has other readers") {
    auto w = rnd({3, 2, 3, 3}, 1), scale = rnd({3}, 3), shift = rnd({3}, 4), mean = rnd({3}, 5),
         var = test::random_tensor(Shape{3}, 6, 0.5f, 2.0f);
    GraphBuilder b;
    auto c = b.conv(b.input("x", DType::f32, Shape{1, 2, 7, 13}), b.constant("w", w));
    b.output(b.op1("BatchNormalization", {c, b.constant("scale", scale), b.constant("shift", shift),
                                          b.constant("mean", mean), b.constant("var", var)}), "y");
    Graph g = b.build();
    CHECK(run_fusion_passes(g) == 1);
    REQUIRE(g.nodes[0].op_type == "Conv");
    const HostTensor& nw = g.initializers.at(g.nodes[0].inputs[1]);
    const HostTensor& nb = g.initializers.at(g.nodes[0].inputs[2]);
    for (int k = 0; k < 3; ++k) {
      float s = scale.as<float>()[k] / std::sqrt(var.as<float>()[k] + 1e-5f);
      CHECK(nb.as<float>()[k] == doctest::Approx(shift.as<float>()[k] - mean.as<float>()[k] * s).epsilon(1e-5));
      for (int j = 0; j < 18; ++j)
        CHECK(nw.as<float>()[k * 18 + j] == doctest::Approx(w.as<float>()[k * 18 + j] * s).epsilon(1e-5));
    }
    GraphBuilder b2;
    auto mm = b2.matmul(b2.input("x", DType::f32, Shape{2, 3}), b2.constant("w", rnd({3, 3}, 1)));
    b2.output(b2.relu(mm), "y");
    b2.output(mm, "raw");
    Graph g2 = b2.build();
    CHECK(run_fusion_passes(g2) == 0);
  }
}
