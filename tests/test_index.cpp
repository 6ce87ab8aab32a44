// Index ops against the references in tests/reference/index_ref.cpp: ScatterElements (every axis, every
// reduction, duplicate and negative indices, i32 / i64 indices, updates smaller than data, i32 / f16 / bool
// data), ScatterND (k = 1 .. rank, reductions with duplicates), GatherND (batch_dims 0 .. 2), OneHot
// (every axis, integer and float indices, out of range), Hardmax (every axis, ties, f64), Einsum
// (matmul, batch matmul, diagonal, trace, sums, transposes, ellipsis, implicit output, 3 inputs, f64 /
// i32), MaxUnpool (1-D to 3-D, output_shape, repeated indices, MaxPool -> MaxUnpool in a graph) and
// NonZero (folded at load; a runtime input is an error naming the node), Trilu (kernel and host fold). Odd shapes,
// batch 1, bad input. Tolerance: exact, except Einsum in f32 (1e-5 relative + 1e-5 absolute).
#include <cmath>
#include <random>

#include "layers/index.hpp"
#include "models/op_registry.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/index_ref.hpp"
#include "runtime/minifloat.hpp"
#include "support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::test;

namespace {
std::vector<double> dbl(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void check_near(const std::vector<float>& got, const std::vector<double>& want, double rtol = 0.0, double atol = 0.0) {
  REQUIRE(got.size() == want.size());
  std::vector<float> w(want.begin(), want.end());
  CLDL_CHECK_CLOSE(got.data(), w.data(), w.size(), rtol, atol);
}

std::vector<int64_t> random_indices(size_t n, int64_t lo, int64_t hi, uint32_t seed) {
  return random_ints<int64_t>(n, lo, hi, seed);
}

Tensor up_index(const std::vector<int64_t>& idx, const Shape& s, DType t) {
  return t == DType::i64 ? up(idx, s) : up(std::vector<int32_t>(idx.begin(), idx.end()), s);
}

// Small integers as floats, so add / mul / max / min are exact in any order.
std::vector<float> small_ints(size_t n, uint32_t seed) {
  std::vector<float> v;
  for (auto i : random_indices(n, -3, 3, seed)) v.push_back(float(i));
  return v;
}

Tensor run_ws(Op& op, const std::vector<Tensor>& in, const Shape& out, DType dt = DType::f32) {
  Tensor y = ctx().alloc(out, dt);
  Tensor ws;
  if (op.workspace_bytes()) ws = ctx().alloc(Shape{int64_t((op.workspace_bytes() + 3) / 4)}, DType::f32);
  auto ec = ctx().exec();
  Tensor outs[1] = {y};
  op.enqueue(in, outs, ws.valid() ? &ws : nullptr, ec);
  ctx().finish();
  return y;
}

const char* kReductions[] = {"none", "add", "mul", "max", "min"};
}  // namespace

TEST_SUITE("index") {
  TEST_CASE("ScatterElements: every axis and reduction, duplicates, negative indices, i32 / i64") {
    const Shape s{3, 7, 5};
    auto x = small_ints(size_t(s.numel()), 1);
    Tensor dx = up(x, s);
    for (int64_t ax = -3; ax < 3; ++ax) {
      const int a = int(ax < 0 ? ax + 3 : ax);
      for (Shape is : {Shape{3, 7, 5}, Shape{2, 4, 1}, Shape{1, 1, 1}}) {
        is[a] = a == 0 ? 9 : is[a];  // along the axis the updates may outnumber the data: many duplicates
        auto idx = random_indices(size_t(is.numel()), -s[a], s[a] - 1, uint32_t(7 + a));
        auto upd = small_ints(size_t(is.numel()), uint32_t(3 + a));
        Tensor du = up(upd, is);
        for (const char* red : kReductions) {
          auto want = ref::scatter_elements(dbl(x), s.dims, idx, is.dims, dbl(upd), a, red);
          for (DType it : {DType::i64, DType::i32}) {
            CAPTURE(ax);
            CAPTURE(is.str());
            CAPTURE(red);
            ScatterElementsConfig cfg{s, DType::f32, is, it, ax, scatter_reduction("ScatterElements", red)};
            REQUIRE(ScatterElements::validate(cfg) == s);
            auto op = ScatterElements::create(ctx(), 0, cfg);
            check_near(down<float>(run_ws(*op, {dx, up_index(idx, is, it), du}, s)), want);
            // One work-item per update over the winner workspace (reduction none), as GPUs run few lines.
            cfg.per_update = 1;
            auto op1 = ScatterElements::create(ctx(), 0, cfg);
            check_near(down<float>(run_ws(*op1, {dx, up_index(idx, is, it), du}, s)), want);
            check_near(down<float>(run_op(*op1, {dx, up_index(idx, is, it), du}, s)), want);  // no workspace: walk
          }
        }
      }
    }
    // Batch 1, as the ONNX tests have it; an out-of-range index is skipped (ONNX calls it an error).
    const Shape b{1, 5};
    std::vector<float> d{1, 2, 3, 4, 5}, u{1.5f, 2.5f, 9.0f};
    std::vector<int64_t> idx{1, -3, 5};
    auto op = ScatterElements::create(ctx(), 0, {b, DType::f32, Shape{1, 3}, DType::i64, 1, ScatterReduction::none});
    check_near(down<float>(run_op(*op, {up(d, b), up(idx, Shape{1, 3}), up(u, Shape{1, 3})}, b)), {1, 1.5, 2.5, 4, 5});
    expect_invalid(
        [] {
          ScatterElements::validate({Shape{3, 4}, DType::f32, Shape{3}, DType::i64, 0});
        },
        {"ScatterElements", "rank"});
    expect_invalid(
        [] {
          ScatterElements::validate({Shape{3, 4}, DType::f32, Shape{2, 5}, DType::i64, 0});
        },
        {"ScatterElements", "exceeds", "dim 1"});
    expect_invalid(
        [] {
          ScatterElements::validate({Shape{3, 4}, DType::f32, Shape{2, 4}, DType::f32, 0});
        },
        {"ScatterElements", "indices dtype f32"});
    expect_invalid(
        [] {
          ScatterElements::validate({Shape{3, 4}, DType::boolean, Shape{2, 4}, DType::i64, 0, ScatterReduction::add});
        },
        {"ScatterElements", "reduction 'add'", "bool"});
    expect_invalid([] { scatter_reduction("ScatterElements", "sum"); }, {"ScatterElements", "'sum'", "none, add"});
  }

  TEST_CASE("ScatterElements on i32, f16 and bool data") {
    const Shape s{4, 3};
    const Shape is{6, 3};
    auto idx = random_indices(size_t(is.numel()), -4, 3, 11);
    std::vector<int32_t> xi{1, -2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -12}, ui(size_t(is.numel()));
    for (size_t i = 0; i < ui.size(); ++i) ui[i] = int32_t(i) - 7;
    std::vector<double> xd(xi.begin(), xi.end()), ud(ui.begin(), ui.end());
    for (const char* red : kReductions) {
      CAPTURE(red);
      auto want = ref::scatter_elements(xd, s.dims, idx, is.dims, ud, 0, red);
      auto op = ScatterElements::create(ctx(), 0, {s, DType::i32, is, DType::i64, 0, scatter_reduction("", red)});
      auto got = down<int32_t>(run_ws(*op, {up(xi, s), up(idx, is), up(ui, is)}, s, DType::i32));
      CHECK(std::vector<double>(got.begin(), got.end()) == want);
    }
    // f16: stored as such, reduced in f32 (small integers: exact).
    HostTensor xh(DType::f16, s), uh(DType::f16, is);
    for (size_t i = 0; i < xi.size(); ++i) xh.as<uint16_t>()[i] = graph::float_to_half(float(xi[i]));
    for (size_t i = 0; i < ui.size(); ++i) uh.as<uint16_t>()[i] = graph::float_to_half(float(ui[i]));
    auto want = ref::scatter_elements(xd, s.dims, idx, is.dims, ud, 0, "add");
    auto op = ScatterElements::create(ctx(), 0, {s, DType::f16, is, DType::i64, 0, ScatterReduction::add});
    HostTensor got = ctx().download(run_op(*op, {ctx().upload(xh), up(idx, is), ctx().upload(uh)}, s, DType::f16));
    for (size_t i = 0; i < want.size(); ++i) CHECK(graph::half_to_float(got.as<uint16_t>()[i]) == float(want[i]));
    // bool: moved as bytes.
    std::vector<bool> xb(12, false), ub(size_t(is.numel()), true);
    auto opb = ScatterElements::create(ctx(), 0, {s, DType::boolean, is, DType::i64, 0, ScatterReduction::none, 1});
    CHECK(opb->algorithm().find("winner") != std::string::npos);
    auto gb = down<uint8_t>(run_ws(*opb, {up(xb, s), up(idx, is), up(ub, is)}, s, DType::boolean));
    auto wb = ref::scatter_elements(std::vector<double>(12, 0.0), s.dims, idx, is.dims,
                                    std::vector<double>(ud.size(), 1.0), 0, "none");
    CHECK(std::vector<double>(gb.begin(), gb.end()) == wb);
  }

  TEST_CASE("ScatterND: k = 1 .. rank, every reduction with duplicate tuples, negative indices") {
    const Shape s{4, 5, 3};
    auto x = small_ints(size_t(s.numel()), 2);
    Tensor dx = up(x, s);
    for (int64_t k = 1; k <= 3; ++k) {
      for (Shape lead : {Shape{7}, Shape{2, 3}, Shape{1}}) {
        Shape is = lead;
        is.dims.push_back(k);
        std::vector<int64_t> idx;
        std::mt19937 rng(uint32_t(k * 10 + int64_t(lead.rank())));
        for (int64_t t = 0; t < lead.numel(); ++t)
          for (int64_t j = 0; j < k; ++j) idx.push_back(std::uniform_int_distribution<int64_t>(-s[j], s[j] - 1)(rng));
        ScatterNDConfig cfg{s, DType::f32, is, DType::i64};
        Shape us = ScatterND::updates_shape(cfg);
        auto upd = small_ints(size_t(us.numel()), uint32_t(k));
        for (const char* red : kReductions) {
          for (DType it : {DType::i64, DType::i32}) {
            CAPTURE(k);
            CAPTURE(is.str());
            CAPTURE(red);
            cfg.index_dtype = it;
            cfg.reduction = scatter_reduction("ScatterND", red);
            REQUIRE(ScatterND::validate(cfg) == s);
            auto want = ref::scatter_nd(dbl(x), s.dims, idx, is.dims, dbl(upd), red);
            for (int per_update : {-1, 1}) {
              cfg.per_update = per_update;
              auto op = ScatterND::create(ctx(), 0, cfg);
              check_near(down<float>(run_ws(*op, {dx, up_index(idx, is, it), up(upd, us)}, s)), want);
              check_near(down<float>(run_op(*op, {dx, up_index(idx, is, it), up(upd, us)}, s)), want);
            }
          }
        }
      }
    }
    // The ONNX example shapes: [2, 2] data, element indices, max; an out-of-range tuple is skipped.
    ScatterNDConfig cfg{Shape{2, 2}, DType::f32, Shape{3, 2}, DType::i64, ScatterReduction::max};
    std::vector<int64_t> idx{0, 0, 1, 1, 2, 0};
    check_near(down<float>(run_op(*ScatterND::create(ctx(), 0, cfg),
                                  {up(std::vector<float>{1, 2, 3, 4}, Shape{2, 2}), up(idx, Shape{3, 2}),
                                   up(std::vector<float>{5, 1, 7}, Shape{3})},
                                  Shape{2, 2})),
               {5, 2, 3, 4});
    expect_invalid(
        [] {
          ScatterND::validate({Shape{3, 4}, DType::f32, Shape{2, 3}, DType::i64});
        },
        {"ScatterND", "last dim is 3", "1 .. 2"});
    expect_invalid(
        [] {
          ScatterND::validate({Shape{3, 4}, DType::f32, Shape{}, DType::i64});
        },
        {"ScatterND", "scalar"});
  }

  TEST_CASE("GatherND: batch_dims 0 .. 2, negative indices, out of range reads 0") {
    const Shape s{2, 3, 5, 4};
    auto x = random_floats(size_t(s.numel()), 3);
    Tensor dx = up(x, s);
    for (int64_t b = 0; b <= 2; ++b) {
      for (int64_t k = 1; k <= 4 - b; ++k) {
        Shape is;
        for (int64_t d = 0; d < b; ++d) is.dims.push_back(s[d]);
        is.dims.push_back(3);
        is.dims.push_back(k);
        std::vector<int64_t> idx;
        std::mt19937 rng(uint32_t(b * 7 + k));
        for (int64_t t = 0; t < is.numel() / k; ++t)
          for (int64_t j = 0; j < k; ++j)
            idx.push_back(std::uniform_int_distribution<int64_t>(-s[b + j], s[b + j] - 1)(rng));
        for (DType it : {DType::i64, DType::i32}) {
          CAPTURE(b);
          CAPTURE(k);
          GatherNDConfig cfg{s, DType::f32, is, it, b};
          Shape so = GatherND::validate(cfg);
          ref::Dims od;
          auto want = ref::gather_nd(dbl(x), s.dims, idx, is.dims, int(b), od);
          REQUIRE(so == Shape(od));
          check_near(down<float>(run_op(*GatherND::create(ctx(), 0, cfg), {dx, up_index(idx, is, it)}, so)), want);
        }
      }
    }
    // The ONNX example with batch_dims 1 (i32 data), and an out-of-range index that reads zeros.
    GatherNDConfig cfg{Shape{2, 2, 2}, DType::i32, Shape{2, 1}, DType::i64, 1};
    std::vector<int32_t> d{0, 1, 2, 3, 4, 5, 6, 7};
    auto got = down<int32_t>(run_op(*GatherND::create(ctx(), 0, cfg),
                                    {up(d, Shape{2, 2, 2}), up(std::vector<int64_t>{1, 0}, Shape{2, 1})}, Shape{2, 2},
                                    DType::i32));
    CHECK(got == std::vector<int32_t>{2, 3, 4, 5});
    got = down<int32_t>(run_op(*GatherND::create(ctx(), 0, cfg),
                               {up(d, Shape{2, 2, 2}), up(std::vector<int64_t>{2, -1}, Shape{2, 1})}, Shape{2, 2},
                               DType::i32));
    CHECK(got == std::vector<int32_t>{0, 0, 6, 7});
    expect_invalid(
        [] {
          GatherND::validate({Shape{2, 3}, DType::f32, Shape{3, 1}, DType::i64, 1});
        },
        {"GatherND", "batch dim 0"});
    expect_invalid(
        [] {
          GatherND::validate({Shape{2, 3}, DType::f32, Shape{2, 3}, DType::i64, 0});
        },
        {"GatherND", "last dim is 3"});
    expect_invalid(
        [] {
          GatherND::validate({Shape{2, 3}, DType::f32, Shape{2, 1}, DType::i64, 2});
        },
        {"GatherND", "batch_dims = 2"});
  }

  TEST_CASE("OneHot: every axis, integer and float indices, negative and out-of-range indices") {
    const Shape is{3, 5};
    const int64_t depth = 7;
    auto idx = random_indices(size_t(is.numel()), -9, 8, 4);  // some outside [-7, 7): all off
    for (int64_t ax = -3; ax <= 2; ++ax) {
      const int a = int(ax < 0 ? ax + 3 : ax);
      ref::Dims od;
      auto want = ref::one_hot(std::vector<double>(idx.begin(), idx.end()), is.dims, depth, a, -1.0, 2.5, od);
      for (DType it : {DType::i64, DType::i32, DType::f32}) {
        CAPTURE(ax);
        OneHotConfig cfg{is, it, depth, DType::f32, ax};
        Shape so = OneHot::validate(cfg);
        REQUIRE(so == Shape(od));
        Tensor di = it == DType::f32 ? up(std::vector<float>(idx.begin(), idx.end()), is) : up_index(idx, is, it);
        check_near(down<float>(
                       run_op(*OneHot::create(ctx(), 0, cfg), {di, up(std::vector<float>{-1.0f, 2.5f}, Shape{2})}, so)),
                   want);
      }
    }
    // i32 values, 1-D indices (batch 1).
    OneHotConfig cfg{Shape{1}, DType::i64, 4, DType::i32, -1};
    auto got = down<int32_t>(run_op(*OneHot::create(ctx(), 0, cfg),
                                    {up(std::vector<int64_t>{-1}, Shape{1}), up(std::vector<int32_t>{2, 5}, Shape{2})},
                                    Shape{1, 4}, DType::i32));
    CHECK(got == std::vector<int32_t>{2, 2, 2, 5});
    expect_invalid([] { OneHot::validate({Shape{3}, DType::i64, 0, DType::f32, -1}); }, {"OneHot", "depth = 0"});
    expect_invalid([] { OneHot::validate({Shape{3}, DType::i64, 4, DType::f32, 2}); }, {"OneHot", "axis"});
    expect_invalid(
        [] {
          OneHot::validate({Shape{3}, DType::boolean, 4, DType::f32, 0});
        },
        {"OneHot", "indices dtype bool"});
  }

  TEST_CASE("Hardmax: every axis, first maximum wins ties, f64") {
    const Shape s{3, 4, 7};
    auto x = small_ints(size_t(s.numel()), 5);  // many ties
    Tensor dx = up(x, s);
    for (int64_t ax = -3; ax < 3; ++ax) {
      CAPTURE(ax);
      HardmaxConfig cfg{s, DType::f32, ax};
      REQUIRE(Hardmax::validate(cfg) == s);
      check_near(down<float>(run_op(*Hardmax::create(ctx(), 0, cfg), {dx}, s)),
                 ref::hardmax(dbl(x), s.dims, int(ax < 0 ? ax + 3 : ax)));
    }
    if (supports_dtype(ctx().device(0).info, DType::f64)) {
      std::vector<double> xd{3, 3, 1, -1, 2, 2};
      auto got = down<double>(run_op(*Hardmax::create(ctx(), 0, {Shape{1, 6}, DType::f64, 1}), {up(xd, Shape{1, 6})},
                                     Shape{1, 6}, DType::f64));
      CHECK(got == std::vector<double>{1, 0, 0, 0, 0, 0});
    }
    expect_invalid([] { Hardmax::validate({Shape{3}, DType::i32, -1}); }, {"Hardmax", "i32"});
    expect_invalid([] { Hardmax::validate({Shape{3}, DType::f32, 1}); }, {"Hardmax", "axis"});
  }

  TEST_CASE("Hardmax and Einsum on f16 / bf16 storage (f32 arithmetic)") {
    const Shape s{3, 5};
    auto x = small_ints(size_t(s.numel()), 12);
    for (DType dt : {DType::f16, DType::bf16}) {
      CAPTURE(to_string(dt));
      HostTensor h(dt, s);
      for (size_t i = 0; i < x.size(); ++i)
        static_cast<uint16_t*>(h.data())[i] = dt == DType::f16 ? graph::float_to_half(x[i]) : float_to_bf16(x[i]);
      auto read = [&](const Tensor& t) {
        HostTensor r = ctx().download(t);
        std::vector<float> v;
        for (int64_t i = 0; i < r.numel(); ++i)
          v.push_back(dt == DType::f16 ? graph::half_to_float(static_cast<const uint16_t*>(r.data())[i])
                                       : bf16_to_float(static_cast<const uint16_t*>(r.data())[i]));
        return v;
      };
      Tensor dx = ctx().upload(h);
      check_near(read(run_op(*Hardmax::create(ctx(), 0, {s, dt, 0}), {dx}, s, dt)), ref::hardmax(dbl(x), s.dims, 0));
      ref::Dims od;
      auto want = ref::einsum("ij,kj->ik", {dbl(x), dbl(x)}, {s.dims, s.dims}, od);  // small integers: exact
      check_near(read(run_op(*Einsum::create(ctx(), 0, {"ij,kj->ik", {s, s}, dt}), {dx, dx}, Shape(od), dt)), want);
    }
  }

  TEST_CASE("Einsum: matmul, batch matmul, diagonal, trace, sums, transposes, ellipsis, implicit, 3 inputs") {
    struct Case {
      std::string eq;
      std::vector<Shape> in;
    };
    const Case cases[] = {
        {"ij,jk->ik", {Shape{3, 5}, Shape{5, 7}}},
        {"bij,bjk->bik", {Shape{2, 3, 5}, Shape{2, 5, 4}}},
        {"bij,bjk->bik", {Shape{1, 1, 9}, Shape{1, 9, 1}}},
        {"ij,jk", {Shape{3, 5}, Shape{5, 7}}},
        {"ii->i", {Shape{5, 5}}},
        {"ii", {Shape{6, 6}}},
        {"ij->", {Shape{3, 7}}},
        {"ij->i", {Shape{3, 4}}},
        {"ij->ji", {Shape{3, 4}}},
        {"ijk->kji", {Shape{2, 3, 5}}},
        {"i,i", {Shape{5}, Shape{5}}},
        {"i,j->ij", {Shape{3}, Shape{4}}},
        {"...ii->...i", {Shape{3, 5, 5}}},
        {"...ij,...jk->...ik", {Shape{2, 1, 3, 4}, Shape{5, 4, 2}}},
        {"bn,anm,bm->ba", {Shape{2, 3}, Shape{4, 3, 5}, Shape{2, 5}}},
        {"->", {Shape{}}},
        {"BaA,aC->CB", {Shape{2, 3, 4}, Shape{3, 5}}},
        // Matrix products in every layout (the Gemm path), and near misses that stay direct.
        {"bji,bjk->bik", {Shape{2, 5, 3}, Shape{2, 5, 4}}},
        {"bij,bkj->bik", {Shape{3, 3, 5}, Shape{3, 4, 5}}},
        {"ik,jk->ji", {Shape{3, 5}, Shape{4, 5}}},
        {"ij,jk->ki", {Shape{3, 5}, Shape{5, 7}}},
        {"kj,bik->bji", {Shape{6, 3}, Shape{2, 4, 6}}},
        {"bij,jk->bik", {Shape{2, 3, 5}, Shape{5, 4}}},
        {"ij,j->i", {Shape{3, 5}, Shape{5}}},
    };
    for (const auto& c : cases) {
      CAPTURE(c.eq);
      EinsumConfig cfg{c.eq, c.in, DType::f32};
      std::vector<Tensor> ins;
      std::vector<std::vector<double>> xs;
      std::vector<ref::Dims> ds;
      for (size_t t = 0; t < c.in.size(); ++t) {
        auto x = random_floats(size_t(c.in[t].numel()), uint32_t(20 + t));
        ins.push_back(up(x, c.in[t]));
        xs.push_back(dbl(x));
        ds.push_back(c.in[t].dims);
      }
      Shape so = Einsum::validate(cfg);
      ref::Dims od;
      auto want = ref::einsum(c.eq, xs, ds, od);
      REQUIRE(so == Shape(od));
      auto op = Einsum::create(ctx(), 0, cfg);
      check_near(down<float>(run_op(*op, ins, so)), want, 1e-5, 1e-5);
      const bool product = c.eq == "ij,jk->ik" || c.eq == "bij,bjk->bik" || c.eq == "ij,jk" || c.eq == "bji,bjk->bik" ||
                           c.eq == "bij,bkj->bik" || c.eq == "ik,jk->ji" || c.eq == "ij,jk->ki";
      if (product) CHECK(op->algorithm().find("gemm") != std::string::npos);
      if (c.eq == "bij,jk->bik" || c.eq == "i,i") CHECK(op->algorithm().find("direct") != std::string::npos);
    }
    // i32 and f64 (exact on integers).
    std::vector<int32_t> a{1, 2, 3, 4, 5, 6}, b{1, -1, 2, 0, 3, 1};
    auto got = down<int32_t>(run_op(*Einsum::create(ctx(), 0, {"ij,kj->ik", {Shape{2, 3}, Shape{2, 3}}, DType::i32}),
                                    {up(a, Shape{2, 3}), up(b, Shape{2, 3})}, Shape{2, 2}, DType::i32));
    CHECK(got == std::vector<int32_t>{5, 9, 11, 21});
    if (supports_dtype(ctx().device(0).info, DType::f64)) {
      std::vector<double> d{1, 2, 3, 4};
      auto g = down<double>(run_op(*Einsum::create(ctx(), 0, {"ii", {Shape{2, 2}}, DType::f64}), {up(d, Shape{2, 2})},
                                   Shape{}, DType::f64));
      CHECK(g == std::vector<double>{5});
    }
    expect_invalid(
        [] {
          Einsum::validate({"ij,jk->ik", {Shape{3, 5}, Shape{4, 7}}, DType::f32});
        },
        {"Einsum", "label 'j'", "extent 4"});
    expect_invalid([] { Einsum::validate({"ij->k", {Shape{3, 5}}, DType::f32}); }, {"Einsum", "'k' is in no input"});
    expect_invalid(
        [] {
          Einsum::validate({"ij,jk->ik", {Shape{3, 5}}, DType::f32});
        },
        {"Einsum", "2 input terms for 1"});
    expect_invalid([] { Einsum::validate({"ijk->i", {Shape{3, 5}}, DType::f32}); }, {"Einsum", "3 labels", "[3, 5]"});
    expect_invalid([] { Einsum::validate({"i1->i", {Shape{3, 5}}, DType::f32}); }, {"Einsum", "'1' is not a label"});
    expect_invalid([] { Einsum::validate({"ij->ii", {Shape{3, 3}}, DType::f32}); }, {"Einsum", "repeated"});
  }

  TEST_CASE("MaxUnpool: 1-D to 3-D, output_shape, repeated indices take the last element") {
    struct Case {
      Shape x;
      std::vector<int64_t> k, st, pads, out;
    };
    const Case cases[] = {
        {Shape{1, 1, 2, 2}, {2, 2}, {2, 2}, {}, {}},
        {Shape{1, 1, 2, 2}, {2, 2}, {2, 2}, {}, {1, 1, 5, 5}},
        {Shape{2, 3, 5}, {3}, {2}, {1, 1}, {}},
        {Shape{1, 2, 3, 2, 3}, {2, 3, 2}, {1, 2, 2}, {}, {1, 2, 5, 5, 7}},
        {Shape{3, 2, 3, 5}, {3, 3}, {1, 1}, {0, 1, 1, 0}, {}},  // overlapping windows: repeated indices
    };
    for (const auto& c : cases) {
      CAPTURE(c.x.str());
      MaxUnpoolConfig cfg{c.x, DType::f32, DType::i64, c.k, c.st, c.pads, c.out};
      Shape so = MaxUnpool::validate(cfg), un = MaxUnpool::inferred_shape(cfg);
      auto x = random_floats(size_t(c.x.numel()), 6);
      auto idx = random_indices(size_t(c.x.numel()), 0, un.numel() - 1, 8);
      idx[0] = -1;  // outside: dropped
      for (DType it : {DType::i64, DType::i32}) {
        cfg.index_dtype = it;
        auto op = MaxUnpool::create(ctx(), 0, cfg);
        check_near(down<float>(run_ws(*op, {up(x, c.x), up_index(idx, c.x, it)}, so)),
                   ref::max_unpool(dbl(x), idx, un.dims, so.dims));
      }
    }
    expect_invalid(
        [] {
          MaxUnpool::validate({Shape{1, 1, 2, 2}, DType::f32, DType::i64, {2}, {}, {}, {}});
        },
        {"MaxUnpool", "kernel_shape has 1"});
    expect_invalid(
        [] {
          MaxUnpool::validate({Shape{1, 1, 2, 2}, DType::f32, DType::i64, {2, 2}, {2, 2}, {}, {1, 1, 3, 5}});
        },
        {"MaxUnpool", "output_shape", "smaller", "dim 2"});
    expect_invalid(
        [] {
          MaxUnpool::validate({Shape{1, 2}, DType::f32, DType::i64, {2}, {}, {}, {}});
        },
        {"MaxUnpool", "spatial"});
    expect_invalid(
        [] {
          MaxUnpool::validate({Shape{1, 1, 2}, DType::f32, DType::i64, {2}, {int64_t(1) << 40}, {}, {}});
        },
        {"MaxUnpool", "exceeds"});
    expect_invalid(
        [] {
          MaxUnpool::validate({Shape{1 << 20, 1 << 10, 2}, DType::f32, DType::i64, {2}, {}, {}, {}});
        },
        {"MaxUnpool", "2^31 - 1"});
  }

  TEST_CASE("MaxPool -> MaxUnpool in a graph puts every maximum back in place") {
    using namespace graph;
    GraphBuilder b("unpool", 18);
    const Shape s{2, 3, 6, 4};  // MaxPool's indices are flat over this shape, the unpooled one
    auto x = b.input("x", DType::f32, s);
    std::map<std::string, AttrValue> attrs{{"kernel_shape", std::vector<int64_t>{2, 2}},
                                           {"strides", std::vector<int64_t>{2, 2}}};
    auto pool = b.op("MaxPool", {x}, attrs, 2);
    b.output(b.op1("MaxUnpool", {pool[0], pool[1]}, attrs), "y");
    HostTensor hx = random_tensor(s, 9);
    auto out = run_graph(b.build(), {{"x", hx}});
    const HostTensor& y = out.at("y");
    REQUIRE(y.shape() == s);
    const float* px = hx.as<float>();
    const float* py = y.as<float>();
    for (int64_t n = 0; n < 6; ++n)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 2; ++j) {
          float m = -1e30f, found = 0;
          int nonzero = 0;
          for (int64_t di = 0; di < 2; ++di)
            for (int64_t dj = 0; dj < 2; ++dj) {
              const int64_t p = n * 24 + (2 * i + di) * 4 + 2 * j + dj;
              m = std::max(m, px[p]);
              found += py[p];
              nonzero += py[p] != 0.0f;
              CHECK((py[p] == 0.0f || py[p] == px[p]));
            }
          CHECK(found == m);  // the maximum, once, the rest of the window zero
          CHECK(nonzero == 1);
        }
  }

  TEST_CASE("OneHot in a graph: depth known at load, values at run time; a bad depth names the node") {
    using namespace graph;
    for (double depth : {5.0, std::nan(""), -2.0}) {
      GraphBuilder b("onehot");
      auto idx = b.input("idx", DType::i64, Shape{2, 3});
      auto vals = b.input("vals", DType::f32, Shape{2});
      auto d = b.constant("depth", from_doubles(DType::f32, Shape{}, {depth}));
      b.output(b.op1("OneHot", {idx, d, vals}, {{"axis", int64_t(0)}}), "y");
      std::vector<int64_t> iv{0, 4, -1, 7, -5, 2};
      std::map<std::string, HostTensor> feed{
          {"idx", HostTensor::from<int64_t>(Shape{2, 3}, std::span<const int64_t>(iv))},
          {"vals", HostTensor::from<float>(Shape{2}, std::vector<float>{0.5f, 9.0f})}};
      if (depth != 5.0) {
        std::string m = error_of([&] { compile_graph(b.build()); });
        CHECK(m.find("OneHot") != std::string::npos);
        CHECK(m.find("depth") != std::string::npos);
        continue;
      }
      auto out = run_graph(b.build(), feed);
      ref::Dims od;
      auto want = ref::one_hot(std::vector<double>(iv.begin(), iv.end()), {2, 3}, 5, 0, 0.5, 9.0, od);
      const HostTensor& y = out.at("y");
      REQUIRE(y.shape() == Shape(od));
      check_near(std::vector<float>(y.as<float>(), y.as<float>() + y.numel()), want);
    }
  }

  TEST_CASE("Trilu: upper and lower, k across and beyond the matrix, batches, any dtype") {
    for (const Shape& s : {Shape{5, 7}, Shape{3, 6, 4}, Shape{2, 1, 3, 3}, Shape{1, 1}, Shape{4, 1}}) {
      auto x = small_ints(size_t(s.numel()), 9);
      Tensor dx = up(x, s);
      for (bool upper : {true, false})
        for (int64_t k : {int64_t(0), int64_t(1), int64_t(-1), int64_t(2), int64_t(-3), int64_t(9), int64_t(-9)}) {
          CAPTURE(s.str());
          CAPTURE(upper);
          CAPTURE(k);
          TriluConfig cfg{s, DType::f32, k, upper};
          REQUIRE(Trilu::validate(cfg) == s);
          check_near(down<float>(run_op(*Trilu::create(ctx(), 0, cfg), {dx}, s)), ref::trilu(dbl(x), s.dims, k, upper));
        }
    }
    {  // i64 and bool storage: moved as bits
      const Shape s{3, 4};
      std::vector<int64_t> v(12);
      for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(i) * 1000000007LL - 5;
      Tensor dv = ctx().upload(HostTensor::from<int64_t>(s, std::span<const int64_t>(v)));
      Tensor y = ctx().alloc(s, DType::i64);
      auto op = Trilu::create(ctx(), 0, {s, DType::i64, 1, false});
      ExecutionContext ec(ctx().queue());
      op->enqueue(std::vector<Tensor>{dv}, std::vector<Tensor>{y}, nullptr, ec);
      HostTensor h = ctx().download(y);
      for (int64_t i = 0; i < 12; ++i) CHECK(h.as<int64_t>()[i] == (i % 4 - i / 4 <= 1 ? v[size_t(i)] : 0));
    }
    expect_invalid([] { Trilu::validate({Shape{5}, DType::f32, 0, true}); }, {"Trilu", "rank >= 2"});
  }

  TEST_CASE("Trilu in a graph: a constant input folds at load, a runtime input runs the kernel; k must be known") {
    using namespace graph;
    const Shape s{2, 4, 5};
    auto xv = small_ints(size_t(s.numel()), 7);
    std::vector<float> xf(xv.begin(), xv.end());
    const std::vector<int64_t> kv{-1};
    for (bool constant : {true, false}) {
      CAPTURE(constant);
      GraphBuilder b("trilu");
      auto rt = b.input("x", DType::f32, s);
      auto x = constant ? b.constant("c", HostTensor::from<float>(s, std::span<const float>(xf))) : rt;
      auto k = b.constant("k", HostTensor::from<int64_t>(Shape{}, std::span<const int64_t>(kv)));
      b.output(b.op1("Trilu", {x, k}, {{"upper", int64_t(0)}}), "y");
      b.output(b.op1("Identity", {rt}), "z");
      auto out = run_graph(b.build(), {{"x", HostTensor::from<float>(s, std::span<const float>(xf))}});
      const HostTensor& y = out.at("y");
      REQUIRE(y.shape() == s);
      check_near(std::vector<float>(y.as<float>(), y.as<float>() + y.numel()), ref::trilu(dbl(xv), s.dims, -1, false));
    }
    GraphBuilder b("trilu_k_runtime");
    auto x = b.input("x", DType::f32, s);
    auto k = b.input("k", DType::i64, Shape{});
    b.output(b.op1("Trilu", {x, k}), "y");
    std::string m = error_of([&] { compile_graph(b.build()); });
    CHECK(m.find("Trilu") != std::string::npos);
    CHECK(m.find("'k'") != std::string::npos);
  }

  TEST_CASE("NonZero folds a constant input at load; a runtime input is an error naming the node") {
    using namespace graph;
    {
      GraphBuilder b("nz");
      const Shape s{2, 3, 4};
      std::vector<float> v(24, 0.0f);
      for (int i : {1, 5, 6, 17, 23}) v[size_t(i)] = float(i);
      auto c = b.constant("c", HostTensor::from<float>(s, std::span<const float>(v)));
      b.output(b.op1("NonZero", {c}), "y");
      auto x = b.input("unused", DType::f32, Shape{1});
      b.output(b.op1("Identity", {x}), "z");
      auto out = run_graph(b.build(), {{"unused", random_tensor(Shape{1}, 1)}});
      ref::Dims od;
      auto want = ref::non_zero(dbl(v), s.dims, od);
      const HostTensor& y = out.at("y");
      REQUIRE(y.shape() == Shape(od));
      REQUIRE(y.dtype() == DType::i64);
      CHECK(std::vector<int64_t>(y.as<int64_t>(), y.as<int64_t>() + y.numel()) == want);
    }
    {
      GraphBuilder b("nz_runtime");
      auto x = b.input("x", DType::f32, Shape{3});
      b.output(b.op1("NonZero", {x}), "y");
      std::string m = error_of([&] { compile_graph(b.build()); });
      // Run-time data runs as a counted output of a Model (tests/test_data_dependent.cpp); a bare compile
      // cannot plan past it.
      CHECK(m.find("NonZero") != std::string::npos);
      CHECK(m.find("decided by run-time data") != std::string::npos);
      CHECK(m.find("plan the graph as a Model") != std::string::npos);
    }
  }

}  // TEST_SUITE
