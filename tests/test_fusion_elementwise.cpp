// Element-wise fusion (models/fusion_elementwise.cpp, layers/fused.hpp): chains of element-wise nodes
// become one FusedElementwise node whose generated kernel must compute what the separate ops do. Each
// case checks that the group was formed (so a broken pass cannot pass silently) and compares the outputs
// with a host reference computed here in double precision, on odd shapes, broadcasts that need div / mod
// (rank 5), bool / integer values, outputs read by other nodes, scalars, and graphs where fusing too much
// would make a cycle.
#include <cmath>
#include <cstdlib>
#include <functional>

#include "layers/elementwise.hpp"
#include "layers/fused.hpp"
#include "runtime/bundle.hpp"
#include "runtime/program_cache.hpp"
#include "tests/support/graph_util.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

using test::count_ops;

// Element `i` (row-major over `out`) of a tensor of shape `in`, numpy-broadcast to `out`.
int64_t bcast_index(const Shape& in, const Shape& out, int64_t i) {
  int64_t off = 0, stride = 1;
  for (int64_t d = int64_t(out.rank()) - 1, k = int64_t(in.rank()) - 1; d >= 0; --d, --k) {
    int64_t c = i % out[size_t(d)];
    i /= out[size_t(d)];
    if (k >= 0) {
      if (in[size_t(k)] != 1) off += c * stride;
      stride *= in[size_t(k)];
    }
  }
  return off;
}

struct Run {
  Graph g;
  std::map<std::string, HostTensor> out;
};

Run prepare_and_run(Graph g, const std::map<std::string, HostTensor>& in) {
  Run r;
  prepare(g);
  r.g = g;
  r.out = CompiledModel::compile(test::shared_ctx(), std::move(g))->session()->run(in);
  return r;
}

void check_against(const HostTensor& got, const Shape& shape, const std::function<double(int64_t)>& ref,
                   double tol = 1e-5) {
  REQUIRE(got.shape() == shape);
  for (int64_t i = 0; i < shape.numel(); ++i) {
    double want = ref(i);
    INFO("element " << i);
    CHECK(got.as<float>()[i] == doctest::Approx(want).epsilon(tol).scale(1.0));
  }
}

HostTensor scalar(float v) { return HostTensor::from<float>(Shape{}, std::vector<float>{v}); }

}  // namespace

TEST_SUITE("fusion_elementwise") {
  TEST_CASE("bias add, SiLU and residual over an odd shape become one kernel") {
    for (Shape xs : {Shape{3, 5, 7}, Shape{1, 1, 13}}) {
      const int64_t C = xs[2];
      HostTensor x = test::random_tensor(xs, 1, -3, 3), r = test::random_tensor(xs, 2), bias = test::random_tensor(Shape{C}, 3);
      GraphBuilder b("silu", 17);
      auto xi = b.input("x", DType::f32, xs);
      auto ri = b.input("r", DType::f32, xs);
      auto h = b.add(xi, b.constant("bias", bias));
      auto y = b.add(b.op1("Mul", {h, b.op1("Sigmoid", {h})}), ri);
      b.output(b.op1("Mul", {y, b.constant("half", scalar(0.5f))}), "y");
      Run run = prepare_and_run(b.build(), {{"x", x}, {"r", r}});
      CHECK(count_ops(run.g, "FusedElementwise") == 1);
      CHECK(run.g.nodes.size() == 1);
      check_against(run.out["y"], xs, [&](int64_t i) {
        double hv = double(x.as<float>()[i]) + bias.as<float>()[i % C];
        return 0.5 * (hv / (1 + std::exp(-hv)) + r.as<float>()[i]);
      });
    }
  }

  TEST_CASE("a lone f32 op gets a generated kernel over many elements, the shared one over few") {
    for (int64_t rows : {70, 3}) {  // 70 x 67 = 4690 elements (generated), 3 x 67 (shared)
      Shape s{rows, 67};
      HostTensor x = test::random_tensor(s, 20), b = test::random_tensor(Shape{67}, 21);
      GraphBuilder gb("lone", 17);
      auto y = gb.op1("Div", {gb.input("x", DType::f32, s), gb.constant("b", b)});
      gb.output(y);  // no renaming Identity: one node
      Run run = prepare_and_run(gb.build(), {{"x", x}});
      CHECK(count_ops(run.g, "FusedElementwise") == (rows == 70 ? 1 : 0));
      check_against(run.out[y.name], s, [&](int64_t i) { return double(x.as<float>()[i]) / b.as<float>()[i % 67]; });
    }
  }

  TEST_CASE("rank-5 broadcasts that need div / mod, with an activation and Clip") {
    Shape os{2, 3, 4, 5, 6}, as{2, 1, 4, 1, 6}, cs{3, 1, 5, 1};
    HostTensor a = test::random_tensor(as, 4), c = test::random_tensor(cs, 5), x = test::random_tensor(os, 6);
    GraphBuilder b("bcast", 13);
    auto xi = b.input("x", DType::f32, os);
    auto ai = b.input("a", DType::f32, as);
    auto ci = b.input("c", DType::f32, cs);
    auto t = b.op1("Sub", {b.op1("Mul", {xi, ai}), ci});
    auto lo = b.constant("lo", scalar(-0.25f)), hi = b.constant("hi", scalar(0.3f));
    b.output(b.op1("Clip", {b.op1("LeakyRelu", {t}, {{"alpha", 0.2f}}), lo, hi}), "y");
    Run run = prepare_and_run(b.build(), {{"x", x}, {"a", a}, {"c", c}});
    CHECK(count_ops(run.g, "FusedElementwise") == 1);
    check_against(run.out["y"], os, [&](int64_t i) {
      double v = double(x.as<float>()[i]) * a.as<float>()[bcast_index(as, os, i)] - c.as<float>()[bcast_index(cs, os, i)];
      v = v >= 0 ? v : 0.2 * v;
      return std::min(std::max(v, -0.25), 0.3);
    });
  }

  TEST_CASE("comparisons, logic, Where and Casts from int64 and bool, with a bool output") {
    Shape s{4, 9};
    HostTensor x = test::random_tensor(s, 7, -2, 2), y = test::random_tensor(s, 8, -2, 2);
    HostTensor m(DType::i64, Shape{9});
    for (int64_t i = 0; i < 9; ++i) m.as<int64_t>()[i] = i % 3 == 0 ? 0 : i;
    GraphBuilder b("logic", 17);
    auto xi = b.input("x", DType::f32, s);
    auto yi = b.input("y", DType::f32, s);
    auto mi = b.input("m", DType::i64, Shape{9});
    auto zero = b.constant("zero", scalar(0.0f)), minus1 = b.constant("m1", scalar(-1.0f));
    auto cond = b.op1("And", {b.op1("Greater", {xi, zero}), b.op1("Not", {b.op1("Less", {yi, minus1})})});
    auto mf = b.op1("Cast", {mi}, {{"to", int64_t(1)}});  // int64 -> float
    auto mb = b.op1("Cast", {mi}, {{"to", int64_t(9)}});  // int64 -> bool
    auto w = b.op1("Where", {cond, b.op1("Mul", {xi, b.constant("two", scalar(2.0f))}), b.op1("Sub", {mf, yi})});
    b.output(w, "w");
    b.output(b.op1("Or", {cond, mb}), "c");
    Run run = prepare_and_run(b.build(), {{"x", x}, {"y", y}, {"m", m}});
    CHECK(count_ops(run.g, "FusedElementwise") >= 1);
    CHECK(count_ops(run.g, "Where") == 0);
    auto cond_at = [&](int64_t i) { return x.as<float>()[i] > 0 && !(y.as<float>()[i] < -1); };
    check_against(run.out["w"], s, [&](int64_t i) {
      return cond_at(i) ? 2.0 * x.as<float>()[i] : double(m.as<int64_t>()[i % 9]) - y.as<float>()[i];
    });
    REQUIRE(run.out["c"].dtype() == DType::boolean);
    for (int64_t i = 0; i < s.numel(); ++i)
      CHECK(int(run.out["c"].as<bool>()[i]) == int(cond_at(i) || m.as<int64_t>()[i % 9] != 0));
  }

  TEST_CASE("a value read by a MatMul inside the chain: no cycle, every output right") {
    // t = x + b; u = t @ w (same shape as t); y = t * sigmoid(t) + u. Fusing y with t's group would need u
    // before the group and the group before u.
    const int64_t N = 5;
    HostTensor x = test::random_tensor(Shape{N, N}, 9), bb = test::random_tensor(Shape{N}, 10),
               w = test::random_tensor(Shape{N, N}, 11);
    GraphBuilder b("cycle", 17);
    auto xi = b.input("x", DType::f32, Shape{N, N});
    auto t = b.add(xi, b.constant("b", bb));
    auto u = b.matmul(t, b.constant("w", w));
    auto y = b.add(b.op1("Mul", {t, b.op1("Sigmoid", {t})}), u);
    b.output(b.op1("Tanh", {y}), "y");
    Run run = prepare_and_run(b.build(), {{"x", x}});
    std::vector<double> tv(size_t(N * N)), uv(size_t(N * N), 0.0);
    for (int64_t i = 0; i < N * N; ++i) tv[size_t(i)] = double(x.as<float>()[i]) + bb.as<float>()[i % N];
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < N; ++k) uv[size_t(i * N + j)] += tv[size_t(i * N + k)] * w.as<float>()[k * N + j];
    check_against(run.out["y"], Shape{N, N}, [&](int64_t i) {
      double t_ = tv[size_t(i)];
      return std::tanh(t_ / (1 + std::exp(-t_)) + uv[size_t(i)]);
    });
  }

  TEST_CASE("an intermediate that is also a graph output, Sum / Mean / Max of three, a scalar graph") {
    Shape s{2, 7};
    HostTensor p = test::random_tensor(s, 12), q = test::random_tensor(s, 13), r = test::random_tensor(Shape{7}, 14);
    GraphBuilder b("variadic", 13);
    auto pi = b.input("p", DType::f32, s), qi = b.input("q", DType::f32, s), ri = b.input("r", DType::f32, Shape{7});
    auto sum = b.op1("Sum", {pi, qi, ri});
    auto mean = b.op1("Mean", {sum, qi, pi});
    b.output(sum, "sum");
    b.output(b.op1("Max", {mean, b.op1("Neg", {pi}), ri}), "y");
    Run run = prepare_and_run(b.build(), {{"p", p}, {"q", q}, {"r", r}});
    CHECK(count_ops(run.g, "FusedElementwise") == 1);
    auto sv = [&](int64_t i) { return double(p.as<float>()[i]) + q.as<float>()[i] + r.as<float>()[i % 7]; };
    check_against(run.out["sum"], s, sv);
    check_against(run.out["y"], s, [&](int64_t i) {
      double m = (sv(i) + q.as<float>()[i] + p.as<float>()[i]) / 3;
      return std::max({m, -double(p.as<float>()[i]), double(r.as<float>()[i % 7])});
    });

    GraphBuilder b0("scalar", 17);
    auto z = b0.input("z", DType::f32, Shape{});
    b0.output(b0.op1("Neg", {b0.op1("Exp", {z})}), "y");
    Run r0 = prepare_and_run(b0.build(), {{"z", scalar(0.75f)}});
    CHECK(count_ops(r0.g, "FusedElementwise") == 1);
    check_against(r0.out["y"], Shape{}, [](int64_t) { return -std::exp(0.75); });
  }

  TEST_CASE("the generated program depends on the broadcast pattern, not the sizes; bad programs are errors") {
    FusedConfig c;
    c.in_dtypes = {DType::f32, DType::f32};
    c.steps = {FusedStep{FusedKind::binary, int(BinaryOp::add), 0, 0, {0, 1}},
               FusedStep{FusedKind::unary, int(Act::relu), 0, 0, {2}}};
    c.outputs = {3};
    auto with = [&](Shape x, Shape y) {
      FusedConfig k = c;
      k.in_shapes = {x, y};
      k.shape = x;
      return FusedElementwise::generated_source(k);
    };
    CHECK(with(Shape{8, 16, 32}, Shape{16, 1}) == with(Shape{3, 5, 7}, Shape{5, 1}));
    CHECK(with(Shape{8, 16, 32}, Shape{16, 1}) != with(Shape{8, 16, 32}, Shape{32}));

    FusedConfig bad = c;
    bad.in_shapes = {Shape{4}, Shape{4}};
    bad.shape = Shape{4};
    bad.steps[1].args = {7};
    CHECK_THROWS_WITH_AS(FusedElementwise::validate(bad), doctest::Contains("FusedElementwise"), Error);
    bad = c;
    bad.in_shapes = {Shape{4}, Shape{4}};
    bad.shape = Shape{4};
    bad.in_dtypes[1] = DType::boolean;  // Add of a bool
    CHECK_THROWS_WITH_AS(FusedElementwise::validate(bad), doctest::Contains("float"), Error);
    bad = c;
    bad.in_shapes = {Shape{4}, Shape{3}};
    bad.shape = Shape{4};
    CHECK_THROWS_AS(FusedElementwise::validate(bad), Error);
  }

  TEST_CASE("the launch is padded to a local size that does not follow the shape: nothing written past the end") {
    // Rank 1 (groups of 1024 or 256 items), rank 2 and 3 (rows of up to 64 along the innermost dim);
    // sizes that are multiples of no group.
    Context& cx = *test::shared_ctx();
    for (auto [xs, ys] : {std::pair<Shape, Shape>{Shape{2053}, Shape{2053}},
                          {Shape{37, 101}, Shape{101}},
                          {Shape{5, 3, 70}, Shape{3, 1}},
                          {Shape{7, 384}, Shape{7, 384}}}) {
      FusedConfig c;
      c.in_dtypes = {DType::f32, DType::f32};
      c.in_shapes = {xs, ys};
      c.shape = xs;
      c.steps = {FusedStep{FusedKind::binary, int(BinaryOp::sub), 0, 0, {0, 1}}};
      c.outputs = {2};
      HostTensor x = test::random_tensor(xs, 31), y = test::random_tensor(ys, 32);
      const int64_t n = xs.numel(), total = n + 4096;
      Tensor buf = cx.upload(HostTensor::from<float>(Shape{total}, std::vector<float>(size_t(total), -7.0f)));
      Tensor out = buf;
      out.shape = xs;
      auto op = FusedElementwise::create(cx, 0, c);
      Tensor ins[2] = {cx.upload(x), cx.upload(y)}, outs[1] = {out};
      auto ec = cx.exec();
      op->enqueue(ins, outs, nullptr, ec);
      cx.finish();
      HostTensor got = cx.download(buf);
      for (int64_t i = 0; i < n; ++i)
        REQUIRE(got.as<float>()[i] == x.as<float>()[i] - y.as<float>()[bcast_index(ys, xs, i)]);
      for (int64_t i = n; i < total; ++i) REQUIRE(got.as<float>()[i] == -7.0f);
    }
  }

  TEST_CASE("CLDL_FUSION=0 leaves the nodes alone and gives the same numbers") {
    Shape s{6, 11};
    HostTensor x = test::random_tensor(s, 15, -3, 3);
    auto build = [&] {
      GraphBuilder b("gelu_tanh", 17);
      auto xi = b.input("x", DType::f32, s);
      auto cube = b.op1("Mul", {b.op1("Mul", {xi, xi}), xi});
      auto inner = b.op1("Add", {xi, b.op1("Mul", {cube, b.constant("k", scalar(0.044715f))})});
      auto th = b.op1("Tanh", {b.op1("Mul", {inner, b.constant("c", scalar(0.7978846f))})});
      b.output(b.op1("Div", {b.op1("Mul", {xi, b.op1("Add", {th, b.constant("one", scalar(1.0f))})}),
                             b.constant("two", scalar(2.0f))}),
               "y");
      return b.build();
    };
    Run fused = prepare_and_run(build(), {{"x", x}});
    ::setenv("CLDL_FUSION", "0", 1);
    Run plain = prepare_and_run(build(), {{"x", x}});
    ::unsetenv("CLDL_FUSION");
    CHECK(count_ops(fused.g, "FusedElementwise") + count_ops(fused.g, "Gelu") == 1);
    CHECK(count_ops(plain.g, "FusedElementwise") == 0);
    CLDL_CHECK_CLOSE(fused.out["y"].as<float>(), plain.out["y"].as<float>(), size_t(s.numel()), 1e-5, 1e-6);
  }

  TEST_CASE("a generated program is recorded for an offline bundle and loads from it with no source build") {
    FusedConfig c;
    c.in_dtypes = {DType::f32, DType::f32};
    c.in_shapes = {Shape{3, 5}, Shape{5}};
    c.shape = Shape{3, 5};
    c.steps = {FusedStep{FusedKind::binary, int(BinaryOp::mul), 0, 0, {0, 1}},
               FusedStep{FusedKind::unary, int(Act::tanh), 0, 0, {2}}};
    c.outputs = {3};
    auto& cache = ProgramCache::global();
    std::vector<ProgramSpec> rec;
    cache.start_recording();
    try {
      FusedElementwise::create(test::ctx(), 0, c);
      rec = cache.stop_recording();
    } catch (...) {
      cache.stop_recording();
      throw;
    }
    std::vector<ProgramSpec> generated;
    for (auto& r : rec)
      if (!r.source.empty()) generated.push_back(r);
    REQUIRE(generated.size() == 1);
    CHECK(generated[0].source.find("fused_elementwise") != std::string::npos);
    std::string dir = test::temp_dir("fused-bundle");
    write_bundle(test::ctx(), 0, generated, dir);
    ProgramCache strict(dir + "/cache", false);
    strict.set_binary_bundle(dir, true);
    strict.get_source(test::ctx().cl(), test::ctx().device(), generated[0].file, generated[0].source,
                      generated[0].options);
    CHECK(strict.stats().binary_loads == 1);
    CHECK(strict.source_builds() == 0);
  }
}
