// Element-wise ops against the reference: every activation and unary op, binary ops with numpy
// broadcasting (scalars, size-1 dims, rank mismatch), comparisons and logic to bool, Where, Cast.
// Tolerance: 1e-5 relative (+1e-6 absolute) for transcendental f32 ops, exact for integer, bool, Cast.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "layers/elementwise.hpp"
#include "layers/gemm.hpp"
#include "models/op_registry.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/cnn_ref.hpp"

using namespace cldl;
using namespace cldl::test;

TEST_SUITE("elementwise") {

TEST_CASE("every activation matches apply() on f32") {
  const Shape s{3, 7, 13};
  auto x = random_floats(s.numel(), 11, -4.0f, 4.0f);
  Tensor dx = up(x, s);
  for (int k = 0; k <= int(Act::celu); ++k) {
    Activation a(static_cast<Act>(k), 0.0f, 0.0f);
    a = activation_from_onnx(to_string(a.kind));
    if (a.kind == Act::clip) a = Activation(Act::clip, -0.5f, 1.5f);
    CAPTURE(to_string(a.kind));
    auto op = Unary::create(ctx(), 0, {UnaryOp::activation, a, DType::f32, s});
    auto got = down<float>(run_op(*op, {dx}, s));
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = apply(a, x[i]);
    CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-5, 1e-6);
  }
}

// Sigmoid, SiLU and HardSwish (HardSwish times 1/6, kernels/common.cl) at inputs past exp's range, zeros,
// infinities and NaN through the scalar form (the Unary op) and the float16 form (a GEMM epilogue, C = 1 x B, a
// row of 32: two whole vectors), against apply(): relative 1e-6, 1e-30 absolute; NaN where the reference gives
// NaN (SiLU of -inf, HardSwish of -inf).
TEST_CASE("Sigmoid, SiLU and HardSwish at extreme inputs, scalar and float16 forms") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xs = {-3e38f, -1e4f, -104.0f, -88.0f, -87.5f, -86.9f, -20.0f, -1.0f,  -1e-30f, 0.0f,
                                 1e-30f, 0.37f,  3.0f,    20.0f,  88.0f,  1e4f,   3e38f,  -inf,   inf,     nan,
                                 -5.5f,  -0.25f, 2.5f,    7.0f,   -7.0f,  44.0f,  -44.0f, 0.5f,   -0.5f,   1.0f,
                                 -2.0f,  6.0f};
  REQUIRE(xs.size() == 32);
  auto close = [](float got, float want) {
    if (std::isnan(want)) return std::isnan(got);
    if (std::isinf(want)) return got == want;
    return std::fabs(double(got) - double(want)) <= 1e-6 * std::fabs(double(want)) + 1e-30;
  };
  const Shape s{int64_t(xs.size())};
  for (const char* name : {"Sigmoid", "Silu", "HardSwish"}) {
    const Activation a = activation_from_onnx(name);
    CAPTURE(name);
    auto unary = Unary::create(ctx(), 0, {UnaryOp::activation, a, DType::f32, s});
    const auto scalar = down<float>(run_op(*unary, {up(xs, s)}, s));
    GemmConfig g;
    g.M = 1, g.N = int64_t(xs.size()), g.K = 1, g.act = a, g.provider = GemmProvider::own;
    g.own.nr = 16, g.own.nc = 2;
    auto gemm = Gemm::create(ctx(), 0, g);
    Tensor one = up(std::vector<float>{1.0f}, Shape{1, 1}), b = up(xs, Shape{1, g.N});
    Tensor c = ctx().alloc(Shape{1, g.N}, DType::f32);
    auto ec = ctx().exec();
    gemm->run(one, b, c, ec);
    const auto vec = down<float>(c);
    for (size_t i = 0; i < xs.size(); ++i) {
      const float want = apply(a, xs[i]);
      CAPTURE(xs[i]);
      CHECK(close(scalar[i], want));
      CHECK(close(vec[i], want));
    }
  }
}

TEST_CASE("unary math ops on f32, and the integer / bool forms") {
  const Shape s{5, 13};
  auto x = random_floats(s.numel(), 12, -3.0f, 3.0f);
  x[0] = 2.5f;  // Round: halves to even
  x[1] = -0.5f;
  x[2] = 0.0f;
  std::vector<float> pos(x.size());
  for (size_t i = 0; i < x.size(); ++i) pos[i] = std::fabs(x[i]) + 0.1f;
  struct Case { UnaryOp op; bool positive; float (*f)(float); };
  const Case cases[] = {
      {UnaryOp::abs, false, [](float v) { return std::fabs(v); }},
      {UnaryOp::neg, false, [](float v) { return -v; }},
      {UnaryOp::exp, false, [](float v) { return std::exp(v); }},
      {UnaryOp::log, true, [](float v) { return std::log(v); }},
      {UnaryOp::sqrt, true, [](float v) { return std::sqrt(v); }},
      {UnaryOp::reciprocal, true, [](float v) { return 1.0f / v; }},
      {UnaryOp::floor, false, [](float v) { return std::floor(v); }},
      {UnaryOp::ceil, false, [](float v) { return std::ceil(v); }},
      {UnaryOp::round, false, [](float v) { return std::nearbyint(v); }},
      {UnaryOp::sign, false, [](float v) { return float((v > 0) - (v < 0)); }},
      {UnaryOp::erf, false, [](float v) { return std::erf(v); }},
      {UnaryOp::sin, false, [](float v) { return std::sin(v); }},
      {UnaryOp::cos, false, [](float v) { return std::cos(v); }},
      {UnaryOp::sinh, false, [](float v) { return std::sinh(v); }},
      {UnaryOp::cosh, false, [](float v) { return std::cosh(v); }},
  };
  for (const auto& c : cases) {
    CAPTURE(to_string(c.op));
    const auto& in = c.positive ? pos : x;
    auto op = Unary::create(ctx(), 0, {c.op, {}, DType::f32, s});
    auto got = down<float>(run_op(*op, {up(in, s)}, s));
    std::vector<float> want(in.size());
    for (size_t i = 0; i < in.size(); ++i) want[i] = c.f(in[i]);
    CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-5, 1e-6);
  }
  // Integer Abs / Neg / Sign, exact.
  std::vector<int32_t> xi(s.numel());
  for (size_t i = 0; i < xi.size(); ++i) xi[i] = int32_t(x[i] * 1000);
  for (UnaryOp u : {UnaryOp::abs, UnaryOp::neg, UnaryOp::sign}) {
    auto op = Unary::create(ctx(), 0, {u, {}, DType::i32, s});
    auto got = down<int32_t>(run_op(*op, {up(xi, s)}, s, DType::i32));
    for (size_t i = 0; i < xi.size(); ++i) {
      int32_t w = u == UnaryOp::abs ? std::abs(xi[i]) : u == UnaryOp::neg ? -xi[i] : (xi[i] > 0) - (xi[i] < 0);
      REQUIRE(got[i] == w);
    }
  }
  std::vector<bool> b(s.numel());
  for (size_t i = 0; i < b.size(); ++i) b[i] = x[i] > 0;
  auto op = Unary::create(ctx(), 0, {UnaryOp::not_, {}, DType::boolean, s});
  auto got = down<uint8_t>(run_op(*op, {up(b, s)}, s, DType::boolean));
  for (size_t i = 0; i < b.size(); ++i) REQUIRE(got[i] == uint8_t(!b[i]));
}

TEST_CASE("IsNaN and IsInf (each side) write bool on f32, f16 and bf16; Sinh / Cosh overflow to inf") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x{-1.2f, nan, inf, 2.8f, -inf, inf, 0.0f, -0.0f, -nan, 3.4e38f, -1e-40f};
  const Shape s{int64_t(x.size())};
  struct Case {
    UnaryOp op;
    bool (*f)(float);
  };
  const Case cases[] = {
      {UnaryOp::is_nan, [](float v) { return std::isnan(v); }},
      {UnaryOp::is_inf, [](float v) { return std::isinf(v); }},
      {UnaryOp::is_pos_inf, [](float v) { return std::isinf(v) && v > 0; }},
      {UnaryOp::is_neg_inf, [](float v) { return std::isinf(v) && v < 0; }},
      {UnaryOp::is_inf_none, [](float) { return false; }},
  };
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (const auto& c : cases) {
      CAPTURE(to_string(t));
      CAPTURE(int(c.op));
      UnaryConfig u{c.op, {}, t, s};
      REQUIRE(Unary::output_dtype(u) == DType::boolean);
      auto op = Unary::create(ctx(), 0, u);
      HostTensor xh = graph::cast_host(HostTensor::from<float>(s, std::span<const float>(x)), t);
      auto got = down<uint8_t>(run_op(*op, {ctx().upload(xh)}, s, DType::boolean));
      auto xv = graph::to_doubles(xh);  // as stored: 3.4e38 is inf in f16 and bf16
      for (size_t i = 0; i < x.size(); ++i) CHECK(got[i] == uint8_t(c.f(float(xv[i]))));
    }
  expect_invalid([&] { Unary::validate({UnaryOp::is_nan, {}, DType::i32, s}); }, {"IsNaN", "i32"});
  // Beyond ~89.4 sinh / cosh overflow f32.
  const std::vector<float> big{100.0f, -100.0f, 89.0f};
  for (UnaryOp u : {UnaryOp::sinh, UnaryOp::cosh}) {
    auto op = Unary::create(ctx(), 0, {u, {}, DType::f32, Shape{3}});
    auto got = down<float>(run_op(*op, {up(big, Shape{3})}, Shape{3}));
    CHECK(got[0] == inf);
    CHECK(got[1] == (u == UnaryOp::sinh ? -inf : inf));
    CHECK(std::fabs(got[2] / float(u == UnaryOp::sinh ? std::sinh(89.0) : std::cosh(89.0)) - 1.0f) < 1e-5f);
  }
}

double fref(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::div: return a / b;
    case BinaryOp::pow: return std::pow(a, b);
    case BinaryOp::max: return std::max(a, b);
    case BinaryOp::min: return std::min(a, b);
    case BinaryOp::mod: { double r = std::fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
    case BinaryOp::fmod: return std::fmod(a, b);
    case BinaryOp::prelu: return a < 0 ? a * b : a;
    case BinaryOp::equal: return a == b;
    case BinaryOp::less: return a < b;
    case BinaryOp::less_equal: return a <= b;
    case BinaryOp::greater: return a > b;
    case BinaryOp::greater_equal: return a >= b;
    default: return 0;
  }
}

// Shape pairs covering scalars, size-1 dims, rank mismatch and equal shapes.
const std::vector<std::pair<Shape, Shape>> kBroadcastCases = {
    {Shape{2, 3, 7, 13}, Shape{2, 3, 7, 13}}, {Shape{2, 3, 7, 13}, Shape{}},      {Shape{}, Shape{5}},
    {Shape{2, 3, 7, 13}, Shape{3, 1, 1}},     {Shape{3, 1, 5}, Shape{1, 4, 1}},  {Shape{7, 1}, Shape{13}},
    {Shape{1}, Shape{2, 5, 1, 3}},            {Shape{4, 1, 6, 1}, Shape{5, 1, 7}},
};

TEST_CASE("f32 binary ops with numpy broadcasting") {
  for (auto [sa, sb] : kBroadcastCases) {
    auto a = random_floats(std::max<int64_t>(1, sa.numel()), 21, -2.0f, 2.0f);
    auto b = random_floats(std::max<int64_t>(1, sb.numel()), 22, 0.5f, 2.0f);
    for (size_t i = 0; i < b.size(); i += 2) b[i] = -b[i];
    for (size_t i = 0; i < std::min(a.size(), b.size()); i += 5) a[i] = b[i];  // ties for comparisons
    Tensor da = up(a, sa), db = up(b, sb);
    for (int k = 0; k <= int(BinaryOp::greater_equal); ++k) {
      BinaryOp bop = static_cast<BinaryOp>(k);
      CAPTURE(to_string(bop));
      CAPTURE(sa.str());
      CAPTURE(sb.str());
      std::vector<float> a2 = a;
      if (bop == BinaryOp::pow)
        for (auto& v : a2) v = std::fabs(v) + 0.1f;
      BinaryConfig cfg{bop, DType::f32, sa, sb};
      auto op = Binary::create(ctx(), 0, cfg);
      Shape so = Binary::validate(cfg);
      ref::Dims od;
      auto want = ref::binary<float, float>(a2, sa.dims, b, sb.dims,
                                            [&](float x, float y) { return float(fref(bop, x, y)); }, od);
      REQUIRE(Shape(od) == so);
      if (is_comparison(bop)) {
        auto got = down<uint8_t>(run_op(*op, {da, db}, so, DType::boolean));
        for (size_t i = 0; i < want.size(); ++i) REQUIRE(float(got[i]) == want[i]);
      } else {
        auto got = down<float>(run_op(*op, {bop == BinaryOp::pow ? up(a2, sa) : da, db}, so));
        CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-5, 1e-6);
      }
    }
  }
}

TEST_CASE("PRelu with a per-channel slope broadcast over NCHW") {
  Shape sx{2, 5, 7, 13}, ss{5, 1, 1};
  auto x = random_floats(sx.numel(), 31), s = random_floats(ss.numel(), 32, 0.0f, 0.5f);
  auto op = Binary::create(ctx(), 0, {BinaryOp::prelu, DType::f32, sx, ss});
  auto got = down<float>(run_op(*op, {up(x, sx), up(s, ss)}, sx));
  ref::Dims od;
  auto want = ref::binary<float, float>(x, sx.dims, s, ss.dims, [](float a, float b) { return a < 0 ? a * b : a; }, od);
  CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-6, 0.0);
}

TEST_CASE("integer arithmetic, comparisons and bool logic are exact") {
  Shape sa{3, 1, 5}, sb{4, 1};
  std::vector<int64_t> a(sa.numel()), b(sb.numel());
  for (size_t i = 0; i < a.size(); ++i) a[i] = int64_t(i * 37 % 23) - 11;
  for (size_t i = 0; i < b.size(); ++i) b[i] = int64_t(i * 5 % 7) - 3;  // includes 0: Div/Mod give 0
  Shape so = Binary::validate({BinaryOp::add, DType::i64, sa, sb});
  for (BinaryOp bop : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::mod, BinaryOp::fmod,
                       BinaryOp::max, BinaryOp::min, BinaryOp::less, BinaryOp::equal}) {
    CAPTURE(to_string(bop));
    auto op = Binary::create(ctx(), 0, {bop, DType::i64, sa, sb});
    ref::Dims od;
    auto want = ref::binary<int64_t, int64_t>(a, sa.dims, b, sb.dims, [&](int64_t x, int64_t y) -> int64_t {
      switch (bop) {
        case BinaryOp::add: return x + y;
        case BinaryOp::sub: return x - y;
        case BinaryOp::mul: return x * y;
        case BinaryOp::div: return y == 0 ? 0 : x / y;
        case BinaryOp::mod: { if (!y) return 0; int64_t r = x % y; return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r; }
        case BinaryOp::fmod: return y == 0 ? 0 : x % y;
        case BinaryOp::max: return std::max(x, y);
        case BinaryOp::min: return std::min(x, y);
        case BinaryOp::less: return x < y;
        default: return x == y;
      }
    }, od);
    if (is_comparison(bop)) {
      auto got = down<uint8_t>(run_op(*op, {up(a, sa), up(b, sb)}, so, DType::boolean));
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(int64_t(got[i]) == want[i]);
    } else {
      auto got = down<int64_t>(run_op(*op, {up(a, sa), up(b, sb)}, so, DType::i64));
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == want[i]);
    }
  }
  std::vector<bool> p(sa.numel()), q(sb.numel());
  for (size_t i = 0; i < p.size(); ++i) p[i] = a[i] > 0;
  for (size_t i = 0; i < q.size(); ++i) q[i] = b[i] > 0;
  for (BinaryOp bop : {BinaryOp::and_, BinaryOp::or_, BinaryOp::xor_}) {
    auto op = Binary::create(ctx(), 0, {bop, DType::boolean, sa, sb});
    auto got = down<uint8_t>(run_op(*op, {up(p, sa), up(q, sb)}, so, DType::boolean));
    ref::Dims od;
    auto want = ref::binary<bool, bool>(p, sa.dims, q, sb.dims, [&](bool x, bool y) {
      return bop == BinaryOp::and_ ? x && y : bop == BinaryOp::or_ ? x || y : x != y; }, od);
    for (size_t i = 0; i < want.size(); ++i) REQUIRE(bool(got[i]) == want[i]);
  }
}

// Integer reference in the numpy / ONNX semantics: +, -, * wrap (computed in uint64 and truncated), Div
// truncates (0 on division by zero, MIN / -1 wraps), Mod takes the divisor's sign, Pow by repeated
// multiplication.
template <typename T>
T int_ref(BinaryOp op, T x, T y) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case BinaryOp::add: return T(U(uint64_t(x) + uint64_t(y)));
    case BinaryOp::sub: return T(U(uint64_t(x) - uint64_t(y)));
    case BinaryOp::mul: return T(U(uint64_t(x) * uint64_t(y)));
    case BinaryOp::div:
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<T>) if (y == T(-1)) return T(U(0) - U(x));
      return T(x / y);
    case BinaryOp::mod: {
      if (y == 0) return 0;
      if constexpr (std::is_signed_v<T>) if (y == T(-1)) return 0;
      T r = T(x % y);
      return (r != 0 && ((r < 0) != (y < 0))) ? T(r + y) : r;
    }
    case BinaryOp::pow: {
      if constexpr (std::is_signed_v<T>)
        if (y < 0) return x == 1 ? T(1) : x == T(-1) ? T((y % 2) ? -1 : 1) : T(0);
      uint64_t r = 1;
      for (T k = 0; k < y; ++k) r *= uint64_t(x);
      return T(U(r));
    }
    case BinaryOp::max: return std::max(x, y);
    case BinaryOp::min: return std::min(x, y);
    case BinaryOp::equal: return x == y;
    case BinaryOp::less: return x < y;
    case BinaryOp::less_equal: return x <= y;
    case BinaryOp::greater: return x > y;
    default: return x >= y;
  }
}

// Every op of one integer type on odd broadcast shapes, with the type's extremes and, for Pow, small
// exponents (negative ones too for signed types).
template <typename T>
void check_int_binary(DType dt) {
  CAPTURE(to_string(dt));
  const Shape sa{3, 1, 5}, sb{4, 1};
  const T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
  std::vector<T> a(size_t(sa.numel())), b(size_t(sb.numel())), e(b.size());
  const T pa[] = {lo, hi, T(hi - 1), T(0), T(1), T(7), T(hi / 3), T(lo / 2 + 1), T(100), T(-7), T(-1), T(13)};
  for (size_t i = 0; i < a.size(); ++i) a[i] = pa[i % 12];
  const T pb[] = {T(3), T(0), T(-1), T(hi), T(-5), T(2)};  // 0: Div / Mod give 0; -1: MIN / -1
  for (size_t i = 0; i < b.size(); ++i) b[i] = pb[i % 6];
  for (size_t i = 0; i < e.size(); ++i) e[i] = std::is_signed_v<T> && i % 3 == 2 ? T(-T(i % 2) - 1) : T(i % 5 + 1);
  Shape so = Binary::validate({BinaryOp::add, dt, sa, sb});
  for (BinaryOp bop : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::mod, BinaryOp::pow,
                       BinaryOp::max, BinaryOp::min, BinaryOp::equal, BinaryOp::less, BinaryOp::less_equal,
                       BinaryOp::greater, BinaryOp::greater_equal}) {
    CAPTURE(to_string(bop));
    const auto& bb = bop == BinaryOp::pow ? e : b;
    auto op = Binary::create(ctx(), 0, {bop, dt, sa, sb});
    ref::Dims od;
    auto want = ref::binary<T, T>(a, sa.dims, bb, sb.dims, [&](T x, T y) { return int_ref(bop, x, y); }, od);
    if (is_comparison(bop)) {
      auto got = down<uint8_t>(run_op(*op, {up(a, sa), up(bb, sb)}, so, DType::boolean));
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(T(got[i]) == want[i]);
    } else {
      auto got = down<T>(run_op(*op, {up(a, sa), up(bb, sb)}, so, dt));
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == want[i]);
    }
  }
  // Abs / Neg wrap at MIN, Relu, and Clip with bounds beyond f32's precision (the bounds are doubles:
  // exact up to 2^53).
  std::vector<T> x(a.begin(), a.end());
  const T cl = std::is_signed_v<T> ? T(-100) : T(5), ch = sizeof(T) == 8 ? T((int64_t(1) << 50) + 3) : T(hi - 2);
  for (UnaryOp u : {UnaryOp::abs, UnaryOp::neg, UnaryOp::sign, UnaryOp::activation}) {
    if (std::is_unsigned_v<T> && u == UnaryOp::neg) continue;
    UnaryConfig c{u, {}, dt, sa};
    if (u == UnaryOp::activation) {
      c.act = activation_from_onnx("Clip");
      c.clip_bounds = std::pair{double(cl), double(ch)};
    }
    CAPTURE(to_string(u));
    auto op = Unary::create(ctx(), 0, c);
    auto got = down<T>(run_op(*op, {up(x, sa)}, sa, dt));
    for (size_t i = 0; i < x.size(); ++i) {
      using U = std::make_unsigned_t<T>;
      T v = x[i], w = u == UnaryOp::abs ? (v < 0 ? T(U(0) - U(v)) : v)
                    : u == UnaryOp::neg ? T(U(0) - U(v))
                    : u == UnaryOp::sign ? T((v > 0) - (v < 0))
                                         : std::clamp(v, cl, ch);
      REQUIRE(got[i] == w);
    }
  }
}

TEST_CASE("integer types: wrap-around, truncating Div, Mod signs, Pow, Max / Min, comparisons, Clip") {
  check_int_binary<int8_t>(DType::i8);
  check_int_binary<int16_t>(DType::i16);
  check_int_binary<int32_t>(DType::i32);
  check_int_binary<int64_t>(DType::i64);
  check_int_binary<uint8_t>(DType::u8);
  check_int_binary<uint16_t>(DType::u16);
  check_int_binary<uint32_t>(DType::u32);
  check_int_binary<uint64_t>(DType::u64);  // includes values above 2^63 (hi, hi / 3 * ...)
}

TEST_CASE("f64 arithmetic keeps what f32 cannot hold, or fails naming op and dtype without cl_khr_fp64") {
  const Shape sa{2, 3, 7}, sb{3, 1};
  Device no_fp64 = ctx().device(0);  // the capability check as it acts on a device without cl_khr_fp64
  no_fp64.info.fp64 = false;
  expect_invalid([&] { check_dtype_support(no_fp64, DType::f64, "Add"); }, {"Add", "f64", "cl_khr_fp64", no_fp64.info.name});
  check_dtype_support(no_fp64, DType::f16, "Add");  // f16 / bf16 need no extension
  check_dtype_support(no_fp64, DType::bf16, "Add");
  if (!ctx().device(0).info.fp64) {
    expect_invalid([&] { Binary::create(ctx(), 0, {BinaryOp::add, DType::f64, sa, sb}); }, {"Add", "f64", "cl_khr_fp64"});
    return;
  }
  std::vector<double> a(size_t(sa.numel())), b(size_t(sb.numel()));
  for (size_t i = 0; i < a.size(); ++i) a[i] = (1.0 + std::ldexp(double(i % 5 + 1), -40)) * (i % 2 ? -1.0 : 1.0) * double(i + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 3.0 + std::ldexp(1.0, -45) * double(i + 1);
  b[1] = -b[1];
  Shape so = Binary::validate({BinaryOp::add, DType::f64, sa, sb});
  for (BinaryOp bop : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::max, BinaryOp::min,
                       BinaryOp::mod, BinaryOp::fmod, BinaryOp::less, BinaryOp::equal}) {
    CAPTURE(to_string(bop));
    auto op = Binary::create(ctx(), 0, {bop, DType::f64, sa, sb});
    ref::Dims od;
    auto want = ref::binary<double, double>(a, sa.dims, b, sb.dims, [&](double x, double y) { return fref(bop, x, y); }, od);
    if (is_comparison(bop)) {
      auto got = down<uint8_t>(run_op(*op, {up(a, sa), up(b, sb)}, so, DType::boolean));
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(double(got[i]) == want[i]);
    } else {
      auto got = down<double>(run_op(*op, {up(a, sa), up(b, sb)}, so, DType::f64));
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == want[i]);  // IEEE-exact in double
    }
  }
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(double(float(a[i])) != a[i]);  // the inputs need f64
  UnaryConfig c{UnaryOp::activation, activation_from_onnx("Clip"), DType::f64, sa};
  c.clip_bounds = std::pair{-3.0 - std::ldexp(1.0, -42), 5.0 + std::ldexp(1.0, -42)};
  auto clip = Unary::create(ctx(), 0, c);
  auto got = down<double>(run_op(*clip, {up(a, sa)}, sa, DType::f64));
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(got[i] == std::clamp(a[i], c.clip_bounds->first, c.clip_bounds->second));
  expect_invalid([&] { Unary::validate({UnaryOp::activation, activation_from_onnx("Celu"), DType::f64, sa}); },
                 {"Celu", "f64"});
}

// f16 / bf16 bits <-> f32 for the reference (IEEE round to nearest even).
float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

TEST_CASE("f16 and bf16: stored as such, computed in f32, rounded to nearest even") {
  const Shape sa{3, 1, 5}, sb{4, 1};
  auto fa = random_floats(sa.numel(), 81, -3.0f, 3.0f), fb = random_floats(sb.numel(), 82, -3.0f, 3.0f);
  for (DType dt : {DType::f16, DType::bf16}) {
    CAPTURE(to_string(dt));
    auto enc = [&](float v) { return dt == DType::f16 ? graph::float_to_half(v) : float_to_bf16(v); };
    auto dec = [&](uint16_t v) { return dt == DType::f16 ? graph::half_to_float(v) : bf16_to_float(v); };
    std::vector<uint16_t> a, b;
    for (float v : fa) a.push_back(enc(v));
    for (float v : fb) b.push_back(enc(v));
    auto upt = [&](const std::vector<uint16_t>& v, const Shape& s) {
      HostTensor h(dt, s);
      std::memcpy(h.data(), v.data(), v.size() * 2);
      return ctx().upload(h);
    };
    Shape so = Binary::validate({BinaryOp::add, dt, sa, sb});
    for (BinaryOp bop : {BinaryOp::add, BinaryOp::mul, BinaryOp::max, BinaryOp::min, BinaryOp::greater}) {
      CAPTURE(to_string(bop));
      auto op = Binary::create(ctx(), 0, {bop, dt, sa, sb});
      ref::Dims od;
      auto want = ref::binary<uint16_t, uint16_t>(a, sa.dims, b, sb.dims, [&](uint16_t x, uint16_t y) -> uint16_t {
        float r = float(fref(bop, dec(x), dec(y)));
        return is_comparison(bop) ? uint16_t(r) : enc(r);
      }, od);
      auto got = is_comparison(bop) ? std::vector<uint16_t>() : down<uint16_t>(run_op(*op, {upt(a, sa), upt(b, sb)}, so, dt));
      if (is_comparison(bop)) {
        auto g8 = down<uint8_t>(run_op(*op, {upt(a, sa), upt(b, sb)}, so, DType::boolean));
        got.assign(g8.begin(), g8.end());
      }
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == want[i]);
    }
    Activation celu = activation_from_onnx("Celu");
    auto op = Unary::create(ctx(), 0, {UnaryOp::activation, celu, dt, sa});
    auto got = down<uint16_t>(run_op(*op, {upt(a, sa)}, sa, dt));
    std::vector<float> g, w;
    for (size_t i = 0; i < a.size(); ++i) {
      g.push_back(dec(got[i]));
      w.push_back(dec(enc(apply(celu, dec(a[i])))));
    }
    // One unit in the last place of the stored type (exp may differ by an f32 ulp before rounding).
    CLDL_CHECK_CLOSE(g.data(), w.data(), w.size(), dt == DType::f16 ? 2e-3 : 8e-3, 1e-6);
  }
}

TEST_CASE("Where broadcasts three ways") {
  Shape sc{3, 1, 13}, sx{7, 1}, sy{};
  auto x = random_floats(sx.numel(), 41), y = random_floats(1, 42);
  std::vector<bool> c(sc.numel());
  for (size_t i = 0; i < c.size(); ++i) c[i] = (i * 7) % 3 == 0;
  auto op = Where::create(ctx(), 0, {DType::f32, sc, sx, sy});
  Shape so = Where::validate({DType::f32, sc, sx, sy});
  REQUIRE(so == Shape{3, 7, 13});
  auto got = down<float>(run_op(*op, {up(c, sc), up(x, sx), up(y, sy)}, so));
  for (int64_t i = 0; i < so.numel(); ++i) {
    auto co = ref::unravel(i, so.dims);
    float w = c[ref::bcast_index(co, sc.dims)] ? x[ref::bcast_index(co, sx.dims)] : y[0];
    REQUIRE(got[i] == w);
  }
}

TEST_CASE("Cast between f32, i32, i64, u8 and bool") {
  Shape s{3, 13};
  auto x = random_floats(s.numel(), 51, -100.0f, 100.0f);
  x[0] = 0.0f;
  for (auto& v : x) if (v < 0 && (&v - x.data()) % 2) v = -v;  // keep some in the u8 range
  auto cast = [&](DType from, DType to, const Tensor& t) {
    auto op = Cast::create(ctx(), 0, {from, to, s});
    return run_op(*op, {t}, s, to);
  };
  Tensor xf = up(x, s);
  auto i32 = down<int32_t>(cast(DType::f32, DType::i32, xf));
  auto i64 = down<int64_t>(cast(DType::f32, DType::i64, xf));
  auto bl = down<uint8_t>(cast(DType::f32, DType::boolean, xf));
  for (size_t i = 0; i < x.size(); ++i) {
    REQUIRE(i32[i] == int32_t(x[i]));
    REQUIRE(i64[i] == int64_t(x[i]));
    REQUIRE(bl[i] == uint8_t(x[i] != 0.0f));
  }
  auto back = down<float>(cast(DType::i32, DType::f32, up(i32, s)));
  auto l2i = down<int32_t>(cast(DType::i64, DType::i32, up(i64, s)));
  for (size_t i = 0; i < x.size(); ++i) {
    REQUIRE(back[i] == float(i32[i]));
    REQUIRE(l2i[i] == i32[i]);
  }
  auto b2f = down<float>(cast(DType::boolean, DType::f32, up(std::vector<bool>(bl.begin(), bl.end()), s)));
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(b2f[i] == float(bl[i]));
}

TEST_CASE("one Binary op serves two threads on two queues at once") {
  Shape sa{3, 7, 13}, sb{7, 1};
  auto op = Binary::create(ctx(), 0, {BinaryOp::sub, DType::f32, sa, sb});
  std::vector<std::vector<float>> got(2);
  std::vector<std::vector<float>> as(2), bs(2);
  for (int t = 0; t < 2; ++t) {
    as[t] = random_floats(sa.numel(), 60 + t);
    bs[t] = random_floats(sb.numel(), 70 + t);
  }
  std::vector<Tensor> ta, tb, tc;
  for (int t = 0; t < 2; ++t) {
    ta.push_back(up(as[t], sa));
    tb.push_back(up(bs[t], sb));
    tc.push_back(ctx().alloc(sa, DType::f32));
  }
  auto work = [&](int t) {
    auto ec = ctx().exec(0, t + 1);
    std::vector<Tensor> in{ta[t], tb[t]};
    Tensor out[1] = {tc[t]};
    for (int rep = 0; rep < 50; ++rep) op->enqueue(in, out, nullptr, ec);
    ec.queue.finish();
  };
  std::thread t0(work, 0), t1(work, 1);
  t0.join();
  t1.join();
  for (int t = 0; t < 2; ++t) {
    auto g = down<float>(tc[t]);
    ref::Dims od;
    auto want = ref::binary<float, float>(as[t], sa.dims, bs[t], sb.dims, [](float x, float y) { return x - y; }, od);
    CLDL_CHECK_CLOSE(g.data(), want.data(), want.size(), 0.0, 0.0);
  }
}

TEST_CASE("bad configurations name the op, the argument and the value") {
  expect_invalid([] { Binary::validate({BinaryOp::add, DType::f32, Shape{3, 4}, Shape{5}}); },
                 {"Add", "input 1", "[5]", "5"});
  expect_invalid([] { Binary::validate({BinaryOp::and_, DType::f32, Shape{3}, Shape{3}}); }, {"And", "bool", "f32"});
  expect_invalid([] { Where::validate({DType::f32, Shape{2}, Shape{3}, Shape{1}}); }, {"Where", "[3]"});
  expect_invalid([] { Unary::validate({UnaryOp::exp, {}, DType::i32, Shape{3}}); }, {"Exp", "i32"});
  expect_invalid([] { Cast::validate({DType::f32, DType(99), Shape{3}}); }, {"Cast", "'to'", "99"});
  auto op = Binary::create(ctx(), 0, {BinaryOp::mul, DType::f32, Shape{3}, Shape{3}});
  Tensor a = ctx().alloc(Shape{4}, DType::f32);
  auto ec = ctx().exec();
  Tensor outs[1] = {a};
  std::vector<Tensor> ins{a, a};
  expect_invalid([&] { op->enqueue(ins, outs, nullptr, ec); }, {"Mul", "input A", "[4]", "[3]"});
}

}  // TEST_SUITE
