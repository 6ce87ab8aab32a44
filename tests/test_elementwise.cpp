// Element-wise ops against the reference: every activation and unary op, binary ops with numpy
// broadcasting (scalars, size-1 dims, rank mismatch), comparisons and logic to bool, Where, Cast.
// Tolerance: 1e-5 relative (+1e-6 absolute) for transcendental f32 ops, exact for integer, bool, Cast.
#include <cmath>
#include <thread>

#include "layers/elementwise.hpp"
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
