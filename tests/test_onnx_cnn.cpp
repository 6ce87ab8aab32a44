// CNN ops through the graph runtime: a tiny CNN (Conv -> BatchNormalization -> Relu -> MaxPool -> Flatten
// -> Gemm -> Softmax) built with the builder and run by the executor, against a composition of the C++
// references (conv_ref, cnn_ref); plus element-wise / data / reduce nodes with broadcasting and
// load-time shape inputs. Tolerance: rtol 1e-4, atol 1e-5 (fp32 conv + GEMM with K <= 90).
#include <atomic>
#include <utility>
#include <cmath>
#include <thread>

#include "tests/reference/cnn_ref.hpp"
#include "tests/reference/conv_ref.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {
const double kRtol = 1e-4, kAtol = 1e-5;
HostTensor rnd(Shape s, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  return test::random_tensor(std::move(s), seed, lo, hi);
}
std::vector<float> vec(const HostTensor& t) { return {t.as<float>(), t.as<float>() + t.numel()}; }
}  // namespace

TEST_SUITE("onnx_cnn") {
  TEST_CASE("tiny CNN: Conv, BatchNorm, Relu, MaxPool, Flatten, Gemm, Softmax") {
    for (int64_t N : {1, 2}) {
      CAPTURE(N);
      const int64_t C = 3, H = 7, W = 13, K = 5, F = 4;
      auto x = rnd({N, C, H, W}, 10), w = rnd({K, C, 3, 3}, 11), bias = rnd({K}, 12), scale = rnd({K}, 13),
           shift = rnd({K}, 14), mean = rnd({K}, 15), var = rnd({K}, 16, 0.5f, 2.0f), fc = rnd({F, K * 3 * 6}, 17),
           fcb = rnd({F}, 18);
      GraphBuilder b("tiny_cnn");
      auto in = b.input("image", DType::f32, Shape{N, C, H, W});
      auto c = b.conv(in, b.constant("w", w), b.constant("b", bias), {1, 1}, {1, 1, 1, 1});
      auto bn = b.op1("BatchNormalization", {c, b.constant("scale", scale), b.constant("shift", shift),
                                             b.constant("mean", mean), b.constant("var", var)});
      auto p = b.max_pool(b.relu(bn), {2, 2}, {2, 2});
      b.output(b.softmax(b.dense(b.flatten(p), b.constant("fc", fc), b.constant("fcb", fcb))), "probs");
      auto m = test::compile_graph(b.build());
      auto out = m->session()->run({{"image", x}});

      ref::ConvParams cp;
      cp.N = N; cp.C = C; cp.H = H; cp.W = W; cp.K = K; cp.KH = 3; cp.KW = 3; cp.PT = cp.PL = cp.PB = cp.PR = 1;
      int64_t OH = 0, OW = 0;
      auto y = ref::conv2d(cp, x.as<float>(), w.as<float>(), bias.as<float>(), Activation{}, OH, OW);
      REQUIRE(OH == H);
      y = ref::batch_norm(y, N, K, OH * OW, scale.as<float>(), shift.as<float>(), mean.as<float>(), var.as<float>(), 1e-5f);
      for (auto& v : y) v = std::max(v, 0.0f);
      ref::PoolParams pp;
      pp.k = {1, 2, 2};
      pp.s = {1, 2, 2};
      std::array<int, 3> pout{};
      auto pooled = ref::pool3d(y, int(N), int(K), {1, int(OH), int(OW)}, pp, pout);
      REQUIRE(pout[1] == 3);
      REQUIRE(pout[2] == 6);
      auto logits = test::gemm_ref(pooled.data(), fc.as<float>(), N, F, K * 18, false, true);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t f = 0; f < F; ++f) logits[size_t(n * F + f)] += fcb.as<float>()[f];
      auto want = ref::softmax(logits, {N, F}, 1, false);
      REQUIRE(out.count("probs"));
      CHECK(out["probs"].shape() == Shape{N, F});
      CLDL_CHECK_CLOSE(out["probs"].as<float>(), want.data(), want.size(), kRtol, kAtol);
    }
  }

  TEST_CASE("Conv + LeakyRelu fused into the conv epilogue; not fused when the conv output has another reader") {
    auto x = rnd({2, 3, 7, 13}, 30), w = rnd({5, 3, 3, 3}, 31), bias = rnd({5}, 32);
    for (bool second_reader : {false, true}) {
      CAPTURE(second_reader);
      GraphBuilder b("conv_act");
      auto c = b.conv(b.input("x", DType::f32, Shape{2, 3, 7, 13}), b.constant("w", w), b.constant("b", bias), {2, 1},
                      {1, 0, 1, 2});
      b.output(b.op1("LeakyRelu", {c}, {{"alpha", 0.2f}}), "y");
      if (second_reader) b.output(c, "c");
      auto m = test::compile_graph(b.build());
      std::string desc;
      for (auto& l : m->describe()) desc += l + "\n";
      CHECK((desc.find("LeakyRelu fused") != std::string::npos) == !second_reader);
      auto out = m->session()->run({{"x", x}});
      ref::ConvParams cp;
      cp.N = 2; cp.C = 3; cp.H = 7; cp.W = 13; cp.K = 5; cp.KH = 3; cp.KW = 3; cp.SH = 2; cp.PT = 1; cp.PB = 1; cp.PR = 2;
      int64_t OH = 0, OW = 0;
      auto want = ref::conv2d(cp, x.as<float>(), w.as<float>(), bias.as<float>(), Activation(Act::leaky_relu, 0.2f), OH, OW);
      REQUIRE(out["y"].shape() == Shape{2, 5, OH, OW});
      CLDL_CHECK_CLOSE(out["y"].as<float>(), want.data(), want.size(), kRtol, kAtol);
    }
  }

  TEST_CASE("two sessions on two threads share one compiled conv (per-thread im2col workspace)") {
    // More than 16 outputs and 5 input channels: im2col + GEMM on CPUs too (not a stem's direct kernel).
    auto w = rnd({20, 5, 3, 3}, 40);
    GraphBuilder b("conv2t");
    b.output(b.conv(b.input("x", DType::f32, Shape{2, 5, 9, 11}), b.constant("w", w), {}, {1, 1}, {1, 1, 1, 1}), "y");
    auto m = test::compile_graph(b.build());
    REQUIRE(!m->describe().empty());
    CHECK(m->describe()[0].find("im2col_gemm") != std::string::npos);  // the algorithm with a workspace
    ref::ConvParams cp;
    cp.N = 2; cp.C = 5; cp.H = 9; cp.W = 11; cp.K = 20; cp.KH = 3; cp.KW = 3; cp.PT = cp.PL = cp.PB = cp.PR = 1;
    std::atomic<int> bad{0};
    auto worker = [&](uint32_t seed) {
      auto s = m->session();
      for (int it = 0; it < 10; ++it) {
        auto x = rnd({2, 5, 9, 11}, seed + uint32_t(it));
        auto out = s->run({{"x", x}});
        int64_t OH = 0, OW = 0;
        // Both threads read w: through a const view, since the non-const accessor copies bytes the graph
        // shares (copy on write), which two threads must not do to one tensor at once.
        auto want = ref::conv2d(cp, x.as<float>(), std::as_const(w).as<float>(), nullptr, Activation{}, OH, OW);
        if (test::compare(out["y"].as<float>(), want.data(), want.size(), kRtol, kAtol).mismatches) bad++;
      }
    };
    std::thread t1(worker, 100), t2(worker, 200);
    t1.join();
    t2.join();
    CHECK(bad == 0);
  }

  TEST_CASE("element-wise broadcast, Clip bounds, Transpose, Slice, Reduce and GlobalAveragePool") {
    auto x = rnd({2, 5, 3, 7}, 20), s = rnd({5, 1, 1}, 21);
    GraphBuilder b("ops");
    auto in = b.input("x", DType::f32, Shape{2, 5, 3, 7});
    auto mul = b.op1("Mul", {in, b.constant("s", s)});
    auto clip = b.op1("Clip", {mul, b.constant("lo", HostTensor::from<float>(Shape{}, std::vector<float>{-0.25f})),
                               b.constant("hi", HostTensor::from<float>(Shape{}, std::vector<float>{0.5f}))});
    auto t = b.op1("Transpose", {clip}, {{"perm", std::vector<int64_t>{0, 3, 1, 2}}});  // [2, 7, 5, 3]
    auto i64 = [](std::vector<int64_t> v) { return HostTensor::from<int64_t>(Shape{int64_t(v.size())}, v); };
    auto sl = b.op1("Slice", {t, b.constant("st", i64({1, 0})), b.constant("en", i64({6, 5})), b.constant("ax", i64({1, 2})),
                              b.constant("sp", i64({2, 2}))});  // [2, 3, 3, 3]
    b.output(b.op1("ReduceSum", {sl, b.constant("axes", i64({1, 3}))}, {{"keepdims", int64_t(0)}}), "r");  // [2, 3]
    b.output(b.op1("GlobalAveragePool", {clip}), "g");  // [2, 5, 1, 1]
    auto out = test::run_graph(b.build(), {{"x", x}});

    ref::Dims dx{2, 5, 3, 7}, dc;
    auto c = ref::binary<float, float>(vec(x), dx, vec(s), {5, 1, 1}, [](float a, float v) { return a * v; }, dc);
    for (auto& v : c) v = std::min(std::max(v, -0.25f), 0.5f);
    ref::Dims dt, dsl, dr;
    auto tr = ref::transpose(c, dx, {0, 3, 1, 2}, dt);
    auto slv = ref::slice(tr, dt, {1, 0}, {6, 5}, {1, 2}, {2, 2}, dsl);
    auto r = ref::reduce(slv, dsl, {1, 3}, false, 0, dr);
    REQUIRE(out["r"].shape() == Shape{2, 3});
    CLDL_CHECK_CLOSE(out["r"].as<float>(), r.data(), r.size(), kRtol, kAtol);
    std::vector<float> g(10, 0.0f);
    for (size_t i = 0; i < c.size(); ++i) g[i / 21] += c[i] / 21.0f;
    REQUIRE(out["g"].shape() == Shape{2, 5, 1, 1});
    CLDL_CHECK_CLOSE(out["g"].as<float>(), g.data(), g.size(), kRtol, kAtol);
  }

  TEST_CASE("Pow with mixed dtypes: f32 ^ i64 and i32 ^ f32 (truncated to the base type)") {
    std::vector<float> xf{1.5f, -2.0f, 0.5f, 3.0f, 2.0f}, yf{2.0f, 3.0f, 0.5f, 0.5f, 10.0f};
    std::vector<int64_t> yi{2, 3, 4, 0, 10};
    std::vector<int32_t> xi{1, -2, 7, 3, 2};
    GraphBuilder b("pow");
    auto a = b.input("a", DType::f32, Shape{5});
    auto e = b.input("e", DType::i64, Shape{5});
    auto ai = b.input("ai", DType::i32, Shape{5});
    auto ef = b.input("ef", DType::f32, Shape{5});
    b.output(b.op1("Pow", {a, e}), "p1");
    b.output(b.op1("Pow", {ai, ef}), "p2");
    auto out = test::run_graph(b.build(), {{"a", HostTensor::from<float>(Shape{5}, xf)},
                                           {"e", HostTensor::from<int64_t>(Shape{5}, yi)},
                                           {"ai", HostTensor::from<int32_t>(Shape{5}, xi)},
                                           {"ef", HostTensor::from<float>(Shape{5}, yf)}});
    REQUIRE(out["p2"].dtype() == DType::i32);
    for (size_t i = 0; i < 5; ++i) {
      CAPTURE(i);
      CHECK(out["p1"].as<float>()[i] == doctest::Approx(std::pow(double(xf[i]), double(yi[i]))).epsilon(1e-5));
      double p = std::pow(double(xi[i]), double(yf[i]));
      if (std::isfinite(p)) CHECK(out["p2"].as<int32_t>()[i] == int32_t(std::trunc(p)));
    }
  }

  TEST_CASE("u8 arithmetic wraps modulo 256 and u8 comparisons give bool (computed in i32)") {
    std::vector<uint8_t> a{200, 3, 0, 255, 17, 9}, bv{100, 5, 1, 255, 17, 200};
    GraphBuilder b("u8");
    auto x = b.input("a", DType::u8, Shape{2, 3});
    auto y = b.input("b", DType::u8, Shape{2, 3});
    b.output(b.op1("Add", {x, y}), "add");
    b.output(b.op1("Sub", {x, y}), "sub");
    b.output(b.op1("Greater", {x, y}), "gt");
    auto out = test::run_graph(b.build(), {{"a", HostTensor::from<uint8_t>(Shape{2, 3}, a)},
                                           {"b", HostTensor::from<uint8_t>(Shape{2, 3}, bv)}});
    REQUIRE(out["add"].dtype() == DType::u8);
    REQUIRE(out["gt"].dtype() == DType::boolean);
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(i);
      CHECK(out["add"].as<uint8_t>()[i] == uint8_t(a[i] + bv[i]));
      CHECK(out["sub"].as<uint8_t>()[i] == uint8_t(a[i] - bv[i]));
      CHECK(static_cast<const uint8_t*>(out["gt"].data())[i] == uint8_t(a[i] > bv[i]));
    }
  }

  TEST_CASE("opset 11 forms: Clip min / max and Split split as attributes, ReduceSum axes as an attribute") {
    auto x = rnd({3, 7}, 50);
    GraphBuilder b("opset11", 11);
    auto in = b.input("x", DType::f32, Shape{3, 7});
    auto clip = b.op1("Clip", {in}, {{"min", -0.5f}, {"max", 0.25f}});
    auto parts = b.op("Split", {clip}, {{"axis", int64_t(1)}, {"split", std::vector<int64_t>{2, 5}}}, 2);
    b.output(parts[0], "a");
    b.output(b.op1("ReduceSum", {parts[1]}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t(0)}}), "s");
    auto out = test::run_graph(b.build(), {{"x", x}});
    REQUIRE(out["a"].shape() == Shape{3, 2});
    REQUIRE(out["s"].shape() == Shape{3});
    for (int r = 0; r < 3; ++r) {
      double sum = 0;
      for (int k = 0; k < 7; ++k) {
        float v = std::min(std::max(x.as<float>()[r * 7 + k], -0.5f), 0.25f);
        if (k < 2) CHECK(out["a"].as<float>()[r * 2 + k] == v);
        else sum += v;
      }
      CHECK(out["s"].as<float>()[r] == doctest::Approx(sum).epsilon(1e-5));
    }
  }

  TEST_CASE("Slice needs its starts at load: the error names the node and the input") {
    GraphBuilder b("bad");
    auto in = b.input("x", DType::f32, Shape{4, 4});
    auto st = b.input("starts", DType::i64, Shape{1});
    b.output(b.op1("Slice", {in, st, b.constant("e", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{2}))}), "y");
    Graph g = b.build();
    auto msg = test::error_of([&] { prepare(g); });
    CHECK(msg.find("Slice") != std::string::npos);
    CHECK(msg.find("starts") != std::string::npos);
    CHECK(msg.find("load time") != std::string::npos);
  }

  TEST_CASE("Resize: a bad attribute value or a roi of the wrong length names the node and the attribute") {
    auto error_for = [](std::map<std::string, AttrValue> attrs, std::vector<float> roi) {
      GraphBuilder b("resize", 18);
      auto x = b.input("x", DType::f32, Shape{1, 2, 5, 7});
      Value r = roi.empty() ? Value{} : b.constant("roi", HostTensor::from<float>(Shape{int64_t(roi.size())}, roi));
      auto sc = b.constant("scales", HostTensor::from<float>(Shape{4}, std::vector<float>{1, 1, 0.6f, 1.5f}));
      b.output(b.op1("Resize", {x, r, sc}, std::move(attrs)), "y");
      Graph g = b.build();
      std::string node = g.nodes.at(0).name;
      std::string msg = test::error_of([&] { prepare(g); });
      CHECK_MESSAGE(msg.find(node) != std::string::npos, msg);
      return msg;
    };
    auto has = [](const std::string& msg, std::initializer_list<const char*> parts) {
      for (const char* p : parts) CHECK_MESSAGE(msg.find(p) != std::string::npos, msg << " lacks " << p);
    };
    has(error_for({{"mode", std::string("bicubic")}}, {}), {"attribute mode", "bicubic"});
    has(error_for({{"coordinate_transformation_mode", std::string("crop")}}, {}),
        {"coordinate_transformation_mode", "crop"});
    has(error_for({{"nearest_mode", std::string("round")}}, {}), {"nearest_mode", "round"});
    has(error_for({{"antialias", int64_t(2)}, {"mode", std::string("linear")}}, {}), {"antialias", "2"});
    has(error_for({{"coordinate_transformation_mode", std::string("tf_crop_and_resize")}}, {}), {"needs the roi"});
    has(error_for({{"coordinate_transformation_mode", std::string("tf_crop_and_resize")}}, {0, 0, 0.1f, 1, 1, 0.9f}),
        {"roi has 6 values", "expected 8"});
    has(error_for({{"coordinate_transformation_mode", std::string("tf_crop_and_resize")},
                   {"axes", std::vector<int64_t>{2, 3}}},
                  {0.1f, 0.2f, 0.9f}),
        {"roi has 3 values", "expected 4"});
  }

  TEST_CASE(
      "Pad mode, MaxPool storage_order and BatchNormalization training_mode: bad values name node and attribute") {
    auto error_for = [](const std::string& op, std::map<std::string, AttrValue> attrs) {
      GraphBuilder b("bad_attr", 15);
      auto x = b.input("x", DType::f32, Shape{2, 3, 5, 7});
      std::vector<Value> in{x};
      int outputs = 1;
      if (op == "Pad")
        in.push_back(
            b.constant("pads", HostTensor::from<int64_t>(Shape{8}, std::vector<int64_t>{0, 0, 1, 1, 0, 0, 1, 1})));
      if (op == "MaxPool") outputs = 2;
      if (op == "BatchNormalization")
        for (const char* name : {"scale", "B", "mean", "var"})
          in.push_back(b.constant(name, HostTensor::from<float>(Shape{3}, std::vector<float>{1, 1, 1})));
      auto outs = b.op(op, in, std::move(attrs), outputs);
      for (size_t i = 0; i < outs.size(); ++i) b.output(outs[i], fmt::format("y{}", i));
      Graph g = b.build();
      std::string node = g.nodes.at(0).name;
      std::string msg = test::error_of([&] { prepare(g); });
      CHECK_MESSAGE(msg.find(node) != std::string::npos, msg);
      return msg;
    };
    auto has = [](const std::string& msg, std::initializer_list<const char*> parts) {
      for (const char* p : parts) CHECK_MESSAGE(msg.find(p) != std::string::npos, msg << " lacks " << p);
    };
    has(error_for("Pad", {{"mode", std::string("mirror")}}), {"attribute mode", "mirror", "wrap"});
    has(error_for("MaxPool", {{"kernel_shape", std::vector<int64_t>{2, 2}}, {"storage_order", int64_t(2)}}),
        {"storage_order", "2"});
    has(error_for("BatchNormalization", {{"training_mode", int64_t(3)}}), {"training_mode", "3"});
    has(error_for("BatchNormalization", {{"training_mode", int64_t(1)}, {"momentum", 1.5f}}), {"momentum", "1.5"});
  }
}
