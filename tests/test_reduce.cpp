// Reductions against the reference over every subset of axes of a rank-4 tensor (positive and
// negative axes), keepdims on/off, noop_with_empty_axes; ArgMax / ArgMin with ties and
// select_last_index. Tolerance: 1e-5 relative + 1e-5 absolute (ReduceProd 1e-4 relative); Arg* exact.
#include <cmath>
#include <cstring>
#include <limits>

#include "layers/reduce.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/cnn_ref.hpp"

using namespace cldl;
using namespace cldl::test;

TEST_SUITE("reduce") {

TEST_CASE("every reduction over every subset of axes, keepdims on and off") {
  const Shape s{2, 3, 7, 5};
  auto x = random_floats(s.numel(), 1, 0.5f, 1.5f);  // positive: ReduceLogSum, and a tame ReduceProd
  Tensor dx = up(x, s);
  for (int mask = 0; mask < 16; ++mask) {
    std::vector<int64_t> axes;
    for (int a = 0; a < 4; ++a)
      if (mask & (1 << a)) axes.push_back(mask % 3 == 0 ? a - 4 : a);  // some negative axes
    for (int op = 0; op <= int(ReduceOp::log_sum_exp); ++op) {
      for (bool keep : {true, false}) {
        if (mask == 0 && op > 1) continue;  // reduce-all is covered twice below for the others
        ReduceConfig cfg{ReduceOp(op), s, axes, keep};
        CAPTURE(to_string(cfg.op));
        CAPTURE(mask);
        CAPTURE(keep);
        Shape so = Reduce::validate(cfg);
        std::vector<int> ax(axes.begin(), axes.end());
        ref::Dims od;
        std::vector<float> want;
        if (op >= int(ReduceOp::log_sum)) {
          want = ref::reduce(x, s.dims, ax, keep, 0, od);
          if (op == int(ReduceOp::log_sum_exp)) {
            std::vector<float> ex(x.size());
            for (size_t i = 0; i < x.size(); ++i) ex[i] = std::exp(x[i]);
            want = ref::reduce(ex, s.dims, ax, keep, 0, od);
          }
          for (auto& w : want) w = std::log(w);
        } else {
          want = ref::reduce(x, s.dims, ax, keep, op, od);
        }
        REQUIRE(so == Shape(od));
        auto got = down<float>(run_op(*Reduce::create(ctx(), 0, cfg), {dx}, so));
        CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), op == int(ReduceOp::prod) ? 1e-4 : 1e-5, 1e-5);
      }
    }
  }
  // noop_with_empty_axes: the identity (ReduceSum), shape unchanged.
  ReduceConfig noop{ReduceOp::sum, s, {}, true, true};
  REQUIRE(Reduce::validate(noop) == s);
  auto got = down<float>(run_op(*Reduce::create(ctx(), 0, noop), {dx}, s));
  CLDL_CHECK_CLOSE(got.data(), x.data(), x.size(), 0.0, 0.0);
}

TEST_CASE("reducing an empty axis gives the identity of each op") {
  const Shape s{2, 0, 4};
  Tensor dx = ctx().alloc(s, DType::f32);
  const float inf = std::numeric_limits<float>::infinity();
  const std::pair<ReduceOp, float> cases[] = {{ReduceOp::sum, 0.0f},       {ReduceOp::sum_square, 0.0f},
                                              {ReduceOp::l1, 0.0f},        {ReduceOp::l2, 0.0f},
                                              {ReduceOp::prod, 1.0f},      {ReduceOp::max, -inf},
                                              {ReduceOp::min, inf},        {ReduceOp::log_sum, -inf},
                                              {ReduceOp::log_sum_exp, -inf}};
  for (auto [op, want] : cases) {
    ReduceConfig cfg{op, s, {1}, true};
    REQUIRE(Reduce::validate(cfg) == Shape{2, 1, 4});
    auto got = down<float>(run_op(*Reduce::create(ctx(), 0, cfg), {dx}, Shape{2, 1, 4}));
    for (float g : got) REQUIRE(g == want);
  }
}

TEST_CASE("LogSumExp is stable for large inputs") {
  const Shape s{3, 1000};
  auto x = random_floats(s.numel(), 2, 90.0f, 100.0f);
  auto got = down<float>(run_op(*Reduce::create(ctx(), 0, {ReduceOp::log_sum_exp, s, {1}, false}), {up(x, s)}, Shape{3}));
  for (int r = 0; r < 3; ++r) {
    double m = -1e30, acc = 0;
    for (int k = 0; k < 1000; ++k) m = std::max(m, double(x[r * 1000 + k]));
    for (int k = 0; k < 1000; ++k) acc += std::exp(x[r * 1000 + k] - m);
    CHECK(got[r] == doctest::Approx(m + std::log(acc)).epsilon(1e-5));
  }
}

TEST_CASE("ArgMax / ArgMin on every axis, with ties and select_last_index") {
  const Shape s{3, 7, 5};
  auto x = random_floats(s.numel(), 3);
  for (auto& v : x) v = std::round(v * 3.0f);  // many ties
  Tensor dx = up(x, s);
  for (int64_t ax = -3; ax < 3; ++ax)
    for (bool is_min : {false, true})
      for (bool last : {false, true})
        for (bool keep : {true, false}) {
          ArgReduceConfig cfg{is_min, s, ax, keep, last};
          Shape so = ArgReduce::validate(cfg);
          auto got = down<int64_t>(run_op(*ArgReduce::create(ctx(), 0, cfg), {dx}, so, DType::i64));
          const int a = int(ax < 0 ? ax + 3 : ax);
          int64_t outer = 1, inner = 1;
          for (int i = 0; i < a; ++i) outer *= s[i];
          for (int i = a + 1; i < 3; ++i) inner *= s[i];
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t in = 0; in < inner; ++in) {
              int64_t best = 0;
              for (int64_t k = 1; k < s[a]; ++k) {
                float v = x[(o * s[a] + k) * inner + in], b = x[(o * s[a] + best) * inner + in];
                if (is_min ? (v < b || (last && v == b)) : (v > b || (last && v == b))) best = k;
              }
              REQUIRE(got[o * inner + in] == best);
            }
        }
}

TEST_CASE("ReduceMax / ReduceMin on bool and u8, exact, with the identity on an empty axis") {
  const Shape s{3, 5, 7};
  std::vector<uint8_t> x(size_t(s.numel()));
  for (size_t i = 0; i < x.size(); ++i) x[i] = uint8_t((i * 37 + 11) % 251);
  for (DType dt : {DType::boolean, DType::u8})
    for (ReduceOp op : {ReduceOp::max, ReduceOp::min})
      for (std::vector<int64_t> axes : {std::vector<int64_t>{1}, {0, 2}, {-1}}) {
        CAPTURE(to_string(dt));
        CAPTURE(to_string(op));
        std::vector<uint8_t> v = x;
        if (dt == DType::boolean)
          for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 4 == 0 || i % 7 == 3) ? 1 : 0;
        ReduceConfig cfg{op, s, axes, true, false, dt};
        Shape so = Reduce::validate(cfg);
        HostTensor hv(dt, s);
        std::memcpy(hv.data(), v.data(), v.size());
        auto got = down<uint8_t>(run_op(*Reduce::create(ctx(), 0, cfg), {ctx().upload(hv)}, so, dt));
        std::vector<float> xf(v.begin(), v.end());
        ref::Dims od;
        auto want = ref::reduce(xf, s.dims, std::vector<int>(axes.begin(), axes.end()), true, op == ReduceOp::max ? 2 : 3, od);
        REQUIRE(Shape(od) == so);
        REQUIRE(want.size() == got.size());
        for (size_t i = 0; i < want.size(); ++i) REQUIRE(float(got[i]) == want[i]);
      }
  const Shape e{2, 0, 3};
  for (DType dt : {DType::boolean, DType::u8})
    for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
      ReduceConfig cfg{op, e, {1}, true, false, dt};
      auto got = down<uint8_t>(run_op(*Reduce::create(ctx(), 0, cfg), {ctx().alloc(e, dt)}, Shape{2, 1, 3}, dt));
      for (uint8_t g : got) REQUIRE(g == (op == ReduceOp::max ? 0 : dt == DType::boolean ? 1 : 255));
    }
  expect_invalid([] { Reduce::validate({ReduceOp::sum, Shape{3}, {}, true, false, DType::boolean}); },
                 {"ReduceSum", "bool"});
}

TEST_CASE("Sum / Mean / Max / Min / Prod / SumSquare / L1 on i32 and i64, exact") {
  const Shape s{3, 5, 7};
  for (DType dt : {DType::i32, DType::i64})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min, ReduceOp::prod,
                        ReduceOp::sum_square, ReduceOp::l1})
      for (std::vector<int64_t> axes : {std::vector<int64_t>{1}, {0, 2}, {-1}}) {
        CAPTURE(to_string(dt));
        CAPTURE(to_string(op));
        // Values in [-2, 2] keep every product and sum exact in the float reference.
        std::vector<int64_t> v(size_t(s.numel()));
        for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t((i * 37 + 11) % 5) - 2;
        HostTensor hv(dt, s);
        for (size_t i = 0; i < v.size(); ++i)
          if (dt == DType::i32) hv.as<int32_t>()[i] = int32_t(v[i]);
          else hv.as<int64_t>()[i] = v[i];
        ReduceConfig cfg{op, s, axes, true, false, dt};
        Shape so = Reduce::validate(cfg);
        Tensor got = run_op(*Reduce::create(ctx(), 0, cfg), {ctx().upload(hv)}, so, dt);
        std::vector<int64_t> g64;
        if (dt == DType::i32) {
          auto g32 = down<int32_t>(got);
          g64.assign(g32.begin(), g32.end());
        } else {
          g64 = down<int64_t>(got);
        }
        std::vector<float> xf(v.begin(), v.end());
        ref::Dims od;
        auto want = ref::reduce(xf, s.dims, std::vector<int>(axes.begin(), axes.end()), true, int(op), od);
        REQUIRE(Shape(od) == so);
        for (size_t i = 0; i < want.size(); ++i) {
          double g = double(g64[i]);
          REQUIRE(g == (op == ReduceOp::mean ? std::trunc(double(want[i])) : double(want[i])));
        }
      }
  // Beyond 32 bits: i64 keeps them.
  HostTensor big(DType::i64, Shape{2, 3});
  for (int64_t i = 0; i < 6; ++i) big.as<int64_t>()[i] = (int64_t(1) << 40) * (i - 2) + i;
  ReduceConfig mx{ReduceOp::max, Shape{2, 3}, {1}, false, false, DType::i64};
  auto got = down<int64_t>(run_op(*Reduce::create(ctx(), 0, mx), {ctx().upload(big)}, Shape{2}, DType::i64));
  CHECK(got[0] == big.as<int64_t>()[2]);
  CHECK(got[1] == big.as<int64_t>()[5]);
  expect_invalid([] { Reduce::validate({ReduceOp::l2, Shape{3}, {}, true, false, DType::i64}); }, {"ReduceL2", "i64"});
}

TEST_CASE("CumSum on u32 / u64 wraps and on f64 keeps what f32 cannot hold") {
  const Shape s{3, 7, 5};
  std::vector<uint64_t> x(size_t(s.numel()));
  for (size_t i = 0; i < x.size(); ++i) x[i] = (uint64_t(1) << 62) + uint64_t(i) * 0x0123456789abcdefull;  // sums pass 2^63, 2^64
  for (int64_t ax : {0, 1, -1})
    for (bool excl : {false, true})
      for (bool rev : {false, true}) {
        CAPTURE(ax);
        // Reference: sequential sums along the axis in uint64 / uint32 (wrap-around) and double.
        const int a = int(ax < 0 ? ax + 3 : ax);
        auto cum = [&](auto zero, const auto& in) {
          auto out = in;
          int64_t inner = 1, outer = 1, len = s[size_t(a)];
          for (int i = 0; i < a; ++i) outer *= s[size_t(i)];
          for (size_t i = size_t(a) + 1; i < 3; ++i) inner *= s[i];
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t in_ = 0; in_ < inner; ++in_) {
              auto acc = zero;
              for (int64_t t = 0; t < len; ++t) {
                int64_t p = (o * len + (rev ? len - 1 - t : t)) * inner + in_;
                if (excl) out[size_t(p)] = acc;
                acc += in[size_t(p)];
                if (!excl) out[size_t(p)] = acc;
              }
            }
          return out;
        };
        auto w64 = cum(uint64_t(0), x);
        auto g64 = down<uint64_t>(run_op(*CumSum::create(ctx(), 0, {s, DType::u64, ax, excl, rev}), {up(x, s)}, s, DType::u64));
        REQUIRE(g64 == w64);
        std::vector<uint32_t> x32(x.begin(), x.end());
        auto g32 = down<uint32_t>(run_op(*CumSum::create(ctx(), 0, {s, DType::u32, ax, excl, rev}), {up(x32, s)}, s, DType::u32));
        REQUIRE(g32 == cum(uint32_t(0), x32));
        std::vector<double> xd;
        for (size_t i = 0; i < x.size(); ++i) xd.push_back(1.0 + std::ldexp(double(i + 1), -40));
        if (ctx().device(0).info.fp64) {
          auto gd = down<double>(run_op(*CumSum::create(ctx(), 0, {s, DType::f64, ax, excl, rev}), {up(xd, s)}, s, DType::f64));
          REQUIRE(gd == cum(0.0, xd));  // same order of additions: exact
        } else {
          expect_invalid([&] { CumSum::create(ctx(), 0, {s, DType::f64, ax, excl, rev}); }, {"CumSum", "f64", "cl_khr_fp64"});
        }
      }
}

TEST_CASE("CumSum on every axis, f32 / i32 / i64, exclusive and reverse") {
  for (Shape s : {Shape{3, 7, 5}, Shape{1}, Shape{11}}) {
    auto xf = random_floats(s.numel(), 21);
    for (int64_t ax = -int64_t(s.rank()); ax < int64_t(s.rank()); ++ax)
      for (bool excl : {false, true})
        for (bool rev : {false, true})
          for (DType dt : {DType::f32, DType::i32, DType::i64}) {
            CAPTURE(s.str());
            CAPTURE(ax);
            CAPTURE(excl);
            CAPTURE(rev);
            CAPTURE(to_string(dt));
            std::vector<double> x(xf.begin(), xf.end());
            if (dt != DType::f32)
              for (auto& v : x) v = std::round(v * 1000.0);
            auto want = ref::cumsum(x, s.dims, int(ax < 0 ? ax + int64_t(s.rank()) : ax), excl, rev);
            CumSumConfig cfg{s, dt, ax, excl, rev};
            REQUIRE(CumSum::validate(cfg) == s);
            auto op = CumSum::create(ctx(), 0, cfg);
            if (dt == DType::f32) {
              auto got = down<float>(run_op(*op, {up(std::vector<float>(x.begin(), x.end()), s)}, s));
              for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == doctest::Approx(want[i]).epsilon(1e-5).scale(1.0));
            } else if (dt == DType::i32) {
              auto got = down<int32_t>(run_op(*op, {up(std::vector<int32_t>(x.begin(), x.end()), s)}, s, dt));
              for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == int32_t(want[i]));
            } else {
              auto got = down<int64_t>(run_op(*op, {up(std::vector<int64_t>(x.begin(), x.end()), s)}, s, dt));
              for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == int64_t(want[i]));
            }
          }
  }
  expect_invalid([] { CumSum::validate({Shape{3}, DType::u8, 0}); }, {"CumSum", "u8"});
  expect_invalid([] { CumSum::validate({Shape{3, 4}, DType::f32, 2}); }, {"CumSum", "axis", "2"});
}

TEST_CASE("ReduceMax / ReduceMin on bool and u8 over subsets of axes, and empty reductions") {
  const Shape s{3, 1, 7, 5};
  auto xf = random_floats(s.numel(), 31, 0.0f, 256.0f);
  std::vector<uint8_t> xu(xf.size());
  std::vector<bool> xb(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) xu[i] = uint8_t(xf[i]), xb[i] = xf[i] > 200.0f;  // bool mostly false
  for (DType dt : {DType::boolean, DType::u8})
    for (ReduceOp op : {ReduceOp::max, ReduceOp::min})
      for (std::vector<int64_t> axes : {std::vector<int64_t>{}, {1}, {-1}, {0, 2}, {2, 3}, {0, 1, 3}})
        for (bool keep : {true, false}) {
          CAPTURE(to_string(dt));
          CAPTURE(to_string(op));
          CAPTURE(axes.size());
          CAPTURE(keep);
          std::vector<float> x(xf.size());
          for (size_t i = 0; i < x.size(); ++i) x[i] = dt == DType::u8 ? float(xu[i]) : float(xb[i]);
          ref::Dims od;
          auto want = ref::reduce(x, s.dims, std::vector<int>(axes.begin(), axes.end()), keep, int(op), od);
          ReduceConfig cfg{op, s, axes, keep};
          cfg.dtype = dt;
          Shape so = Reduce::validate(cfg);
          REQUIRE(so == Shape(od));
          Tensor dx = dt == DType::u8 ? up(xu, s) : up(xb, s);
          auto got = down<uint8_t>(run_op(*Reduce::create(ctx(), 0, cfg), {dx}, so, dt));
          REQUIRE(got.size() == want.size());
          for (size_t i = 0; i < got.size(); ++i) REQUIRE(float(got[i]) == want[i]);
        }
  // Empty reduced axis: false / 0 for max, true / 255 for min.
  const Shape e{2, 0, 3};
  for (DType dt : {DType::boolean, DType::u8})
    for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
      ReduceConfig cfg{op, e, {1}, false};
      cfg.dtype = dt;
      auto got = down<uint8_t>(run_op(*Reduce::create(ctx(), 0, cfg), {ctx().alloc(e, dt)}, Shape{2, 3}, dt));
      const uint8_t want = op == ReduceOp::max ? 0 : dt == DType::boolean ? 1 : 255;
      for (auto g : got) REQUIRE(g == want);
    }
  expect_invalid(
      [] {
        ReduceConfig c{ReduceOp::sum, Shape{2, 3}, {}};
        c.dtype = DType::boolean;
        Reduce::validate(c);
      },
      {"ReduceSum", "bool"});
}

TEST_CASE("bad reduce configurations name the op, the argument and the value") {
  expect_invalid([] { Reduce::validate({ReduceOp::mean, Shape{2, 3}, {2}}); }, {"ReduceMean", "axes", "2"});
  expect_invalid([] { Reduce::validate({ReduceOp::sum, Shape{2, 3}, {1, -1}}); }, {"ReduceSum", "axes[1]", "-1"});
  expect_invalid([] { ArgReduce::validate({true, Shape{2, 3}, -3}); }, {"ArgMin", "axis", "-3"});
}

TEST_CASE("every reduction on f64 accumulates in f64, or fails naming op and dtype without cl_khr_fp64") {
  const Shape s{3, 5, 2, 7};
  const std::vector<int64_t> axes{1, -1};
  std::vector<double> x(size_t(s.numel()));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 1.0 + 1e-9 * double(i % 17) + 0.25 * double(i % 3);  // beyond f32
  if (!supports_dtype(ctx().device(0).info, DType::f64)) {
    expect_invalid([&] { Reduce::create(ctx(), 0, {ReduceOp::sum, s, axes, true, false, DType::f64}); },
                   {"ReduceSum", "f64"});
    return;
  }
  for (int op = 0; op <= int(ReduceOp::log_sum_exp); ++op) {
    for (bool keep : {true, false}) {
      ReduceConfig cfg{ReduceOp(op), s, axes, keep, false, DType::f64};
      CAPTURE(to_string(cfg.op));
      CAPTURE(keep);
      const Shape so = Reduce::validate(cfg);
      // Reference in double: the reduced elements of output (i, k) are x[i, *, k, *].
      std::vector<double> want;
      for (int64_t i = 0; i < s[0]; ++i)
        for (int64_t k = 0; k < s[2]; ++k) {
          std::vector<double> v;
          for (int64_t j = 0; j < s[1]; ++j)
            for (int64_t l = 0; l < s[3]; ++l) v.push_back(x[size_t(((i * s[1] + j) * s[2] + k) * s[3] + l)]);
          double sum = 0, prod = 1, sq = 0, l1 = 0, mx = -INFINITY, mn = INFINITY, se = 0;
          for (double e : v) {
            sum += e, prod *= e, sq += e * e, l1 += std::fabs(e);
            mx = std::max(mx, e), mn = std::min(mn, e);
          }
          for (double e : v) se += std::exp(e - mx);
          const double r[] = {sum, sum / double(v.size()), mx, mn, prod, sq, std::sqrt(sq), l1, std::log(sum),
                              std::log(se) + mx};
          want.push_back(r[op]);
        }
      auto got = down<double>(run_op(*Reduce::create(ctx(), 0, cfg), {up(x, s)}, so, DType::f64));
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == doctest::Approx(want[i]).epsilon(1e-13));
    }
  }
}

}  // TEST_SUITE
