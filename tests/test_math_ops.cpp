// The math and bitwise ops of models/ops_math.cpp against C++'s own functions: Tan, Asin, Acos, Atan,
// Asinh, Acosh, Atanh and Shrink on f32 (odd shapes, batch 1), f64 and f16; BitwiseNot / And / Or / Xor on
// signed and unsigned types with broadcasting; BitShift both ways on u8 ... u64, shifts by the bit width
// or more giving 0; Det (batches, 1x1, singular, pivoting, f64) and DynamicQuantizeLinear (ties, all
// positive / negative / zero data, batch 1); graph-level checks and errors that name the node, the op
// and the argument. Tolerance: 1e-5 relative (+1e-6 absolute) for f32 transcendentals and Det (1e-4 for
// n = 9), 1e-12 for f64, exact for integers and DynamicQuantizeLinear.
#include <cmath>
#include <cstring>
#include <limits>

#include "layers/dynamic_quant.hpp"
#include "layers/elementwise.hpp"
#include "layers/linalg.hpp"
#include "models/builder.hpp"
#include "models/op_registry.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/cnn_ref.hpp"
#include "reference/math_ref.hpp"
#include "support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::test;

namespace {
struct MathCase {
  UnaryOp op;
  float lo, hi;  // input range inside the function's domain
  double (*f)(double);
};
const MathCase kMathCases[] = {
    {UnaryOp::tan, -1.4f, 1.4f, [](double v) { return std::tan(v); }},
    {UnaryOp::asin, -1.0f, 1.0f, [](double v) { return std::asin(v); }},
    {UnaryOp::acos, -1.0f, 1.0f, [](double v) { return std::acos(v); }},
    {UnaryOp::atan, -20.0f, 20.0f, [](double v) { return std::atan(v); }},
    {UnaryOp::asinh, -20.0f, 20.0f, [](double v) { return std::asinh(v); }},
    {UnaryOp::acosh, 1.0f, 30.0f, [](double v) { return std::acosh(v); }},
    {UnaryOp::atanh, -0.99f, 0.99f, [](double v) { return std::atanh(v); }},
};

double shrink(double x, double lambd, double bias) { return x < -lambd ? x + bias : x > lambd ? x - bias : 0.0; }

template <typename T>
T shift(T a, T b, bool left) {
  if (uint64_t(b) >= 8 * sizeof(T)) return 0;
  return left ? T(a << b) : T(a >> b);
}
}  // namespace

TEST_SUITE("math_ops") {

TEST_CASE("inverse and further trigonometry match the C++ library on f32 over odd shapes and batch 1") {
  for (const Shape& s : {Shape{1, 7}, Shape{3, 5, 13}, Shape{1}}) {
    for (const auto& c : kMathCases) {
      CAPTURE(to_string(c.op));
      CAPTURE(s.str());
      auto x = random_floats(size_t(s.numel()), 21, c.lo, c.hi);
      auto op = Unary::create(ctx(), 0, {c.op, {}, DType::f32, s});
      auto got = down<float>(run_op(*op, {up(x, s)}, s));
      std::vector<float> want(x.size());
      for (size_t i = 0; i < x.size(); ++i) want[i] = float(c.f(double(x[i])));
      CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-5, 1e-6);
    }
  }
}

TEST_CASE("trigonometry outside its domain gives NaN; f64 keeps double precision") {
  const Shape s{4};
  std::vector<float> out_of_domain = {1.5f, -2.0f, 0.5f, 3.0f};
  auto asin = Unary::create(ctx(), 0, {UnaryOp::asin, {}, DType::f32, s});
  auto got = down<float>(run_op(*asin, {up(out_of_domain, s)}, s));
  CHECK(std::isnan(got[0]));
  CHECK(std::isnan(got[1]));
  CHECK(got[2] == doctest::Approx(std::asin(0.5)).epsilon(1e-6));
  if (!supports_dtype(ctx().device(0).info, DType::f64)) return;
  const Shape s2{2, 9};
  for (const auto& c : kMathCases) {
    CAPTURE(to_string(c.op));
    auto xf = random_floats(size_t(s2.numel()), 22, c.lo, c.hi);
    std::vector<double> x(xf.begin(), xf.end());
    auto op = Unary::create(ctx(), 0, {c.op, {}, DType::f64, s2});
    auto g = down<double>(run_op(*op, {up(x, s2)}, s2, DType::f64));
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(g[i] == doctest::Approx(c.f(x[i])).epsilon(1e-12));
  }
}

TEST_CASE("Shrink: hard and soft, default and custom lambd / bias, on f32 and f16") {
  const Shape s{3, 11};
  auto x = random_floats(size_t(s.numel()), 23, -3.0f, 3.0f);
  x[0] = 0.5f, x[1] = -0.5f, x[2] = 1.5f, x[3] = -1.5f;  // exactly at +-lambd: 0
  for (auto [lambd, bias] : {std::pair{0.5f, 0.0f}, std::pair{1.5f, 1.5f}, std::pair{0.0f, 0.25f}}) {
    CAPTURE(lambd);
    CAPTURE(bias);
    UnaryConfig u{UnaryOp::shrink, Activation(Act::none, lambd, bias), DType::f32, s};
    auto op = Unary::create(ctx(), 0, u);
    auto got = down<float>(run_op(*op, {up(x, s)}, s));
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = float(shrink(x[i], lambd, bias));
    CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 0.0, 0.0);
  }
  // f16 storage: computed in f32, inputs chosen exact in f16.
  std::vector<uint16_t> h(size_t(s.numel()));
  std::vector<float> hv(h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    hv[i] = float(int(i) - 16) / 4.0f;
    h[i] = graph::float_to_half(hv[i]);
  }
  UnaryConfig u{UnaryOp::shrink, Activation(Act::none, 1.0f, 0.5f), DType::f16, s};
  auto op = Unary::create(ctx(), 0, u);
  auto got = down<uint16_t>(run_op(*op, {ctx().upload([&] {
                                       HostTensor t(DType::f16, s);
                                       std::memcpy(t.data(), h.data(), t.bytes());
                                       return t;
                                     }())},
                                   s, DType::f16));
  for (size_t i = 0; i < h.size(); ++i) REQUIRE(graph::half_to_float(got[i]) == float(shrink(hv[i], 1.0, 0.5)));
}

TEST_CASE("BitwiseNot, BitwiseAnd / Or / Xor on signed and unsigned types with broadcasting are exact") {
  const Shape sa{2, 1, 5}, sb{3, 1}, so{2, 3, 5};
  auto run = [&]<typename T>(T*, DType dt) {
    CAPTURE(to_string(dt));
    auto a = random_ints<int64_t>(size_t(sa.numel()), int64_t(std::numeric_limits<T>::min()) / 2,
                                  int64_t(std::numeric_limits<T>::max() / 2), 31);
    auto b = random_ints<int64_t>(size_t(sb.numel()), 0, int64_t(std::numeric_limits<T>::max() / 2), 32);
    std::vector<T> ta(a.begin(), a.end()), tb(b.begin(), b.end());
    for (BinaryOp bop : {BinaryOp::bit_and, BinaryOp::bit_or, BinaryOp::bit_xor}) {
      CAPTURE(int(bop));
      auto op = Binary::create(ctx(), 0, {bop, dt, sa, sb});
      auto got = down<T>(run_op(*op, {up(ta, sa), up(tb, sb)}, so, dt));
      ref::Dims od;
      auto want = ref::binary<T, T>(ta, sa.dims, tb, sb.dims, [&](T x, T y) -> T {
        return bop == BinaryOp::bit_and ? T(x & y) : bop == BinaryOp::bit_or ? T(x | y) : T(x ^ y);
      }, od);
      REQUIRE(od == so.dims);
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == want[i]);
    }
    auto op = Unary::create(ctx(), 0, {UnaryOp::bitwise_not, {}, dt, sa});
    auto got = down<T>(run_op(*op, {up(ta, sa)}, sa, dt));
    for (size_t i = 0; i < ta.size(); ++i) REQUIRE(got[i] == T(~ta[i]));
  };
  run((int8_t*)nullptr, DType::i8);
  run((int16_t*)nullptr, DType::i16);
  run((int32_t*)nullptr, DType::i32);
  run((int64_t*)nullptr, DType::i64);
  run((uint8_t*)nullptr, DType::u8);
  run((uint16_t*)nullptr, DType::u16);
  run((uint32_t*)nullptr, DType::u32);
  run((uint64_t*)nullptr, DType::u64);
}

TEST_CASE("BitShift left and right on u8 ... u64, shifts by the bit width or more give 0") {
  const Shape sa{3, 7}, sb{7};
  auto run = [&]<typename T>(T*, DType dt) {
    CAPTURE(to_string(dt));
    constexpr int64_t bits = 8 * sizeof(T);
    auto a = random_ints<uint64_t>(size_t(sa.numel()), 0, uint64_t(std::numeric_limits<T>::max()), 41);
    std::vector<T> ta(a.begin(), a.end()), tb(size_t(sb.numel()));
    for (size_t i = 0; i < tb.size(); ++i)  // 0, 1, bits-1, bits, bits+1, and two in between
      tb[i] = T(std::vector<int64_t>{0, 1, bits - 1, bits, bits + 1, bits / 2, 3}[i]);
    for (bool left : {true, false}) {
      CAPTURE(left);
      auto op = Binary::create(ctx(), 0, {left ? BinaryOp::bit_shl : BinaryOp::bit_shr, dt, sa, sb});
      auto got = down<T>(run_op(*op, {up(ta, sa), up(tb, sb)}, sa, dt));
      ref::Dims od;
      auto want = ref::binary<T, T>(ta, sa.dims, tb, sb.dims, [&](T x, T y) { return shift<T>(x, y, left); }, od);
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == want[i]);
    }
  };
  run((uint8_t*)nullptr, DType::u8);
  run((uint16_t*)nullptr, DType::u16);
  run((uint32_t*)nullptr, DType::u32);
  run((uint64_t*)nullptr, DType::u64);
}

TEST_CASE("bad dtypes and attributes name the op, the argument and the value") {
  expect_invalid([] { Unary::validate({UnaryOp::tan, {}, DType::i32, Shape{3}}); }, {"Tan", "i32"});
  expect_invalid([] { Unary::validate({UnaryOp::bitwise_not, {}, DType::f32, Shape{3}}); }, {"BitwiseNot", "f32"});
  expect_invalid([] { Unary::validate({UnaryOp::bitwise_not, {}, DType::boolean, Shape{3}}); }, {"BitwiseNot", "bool"});
  expect_invalid([] { Binary::validate({BinaryOp::bit_and, DType::f32, Shape{3}, Shape{3}}); }, {"BitwiseAnd", "f32"});
  expect_invalid([] { Binary::validate({BinaryOp::bit_shl, DType::i32, Shape{3}, Shape{3}}); },
                 {"BitShift", "i32", "unsigned"});
  using namespace graph;
  {
    GraphBuilder b("shift", 11);
    auto x = b.input("x", DType::u8, Shape{4});
    auto y = b.input("y", DType::u8, Shape{4});
    b.output(b.op1("BitShift", {x, y}, {{"direction", std::string("UP")}}), "z");
    auto m = error_of([&] { compile_graph(b.build()); });
    CHECK(m.find("BitShift") != std::string::npos);
    CHECK(m.find("direction") != std::string::npos);
    CHECK(m.find("UP") != std::string::npos);
  }
  {
    GraphBuilder b("and", 18);
    auto x = b.input("x", DType::i32, Shape{4});
    auto y = b.input("y", DType::i64, Shape{4});
    b.output(b.op1("BitwiseAnd", {x, y}), "z");
    auto m = error_of([&] { compile_graph(b.build()); });
    CHECK(m.find("BitwiseAnd") != std::string::npos);
    CHECK(m.find("i64") != std::string::npos);
  }
}

TEST_CASE("the ops run in a graph with their ONNX attributes") {
  using namespace graph;
  GraphBuilder b("math", 18);
  const Shape s{2, 3};
  auto x = b.input("x", DType::f32, s);
  auto u = b.input("u", DType::u16, s);
  auto k = b.input("k", DType::u16, Shape{1});
  b.output(b.op1("Shrink", {x}, {{"lambd", 0.25f}, {"bias", 0.125f}}), "shrink");
  b.output(b.op1("Atan", {x}), "atan");
  b.output(b.op1("BitShift", {u, k}, {{"direction", std::string("RIGHT")}}), "shr");
  b.output(b.op1("BitwiseXor", {u, k}), "xor");
  std::vector<float> xv = {-1.0f, -0.25f, 0.0f, 0.2f, 0.3f, 2.0f};
  std::vector<uint16_t> uv = {1, 2, 300, 65535, 4096, 7}, kv = {2};
  auto out = run_graph(b.build(), {{"x", HostTensor::from<float>(s, xv)},
                                   {"u", HostTensor::from<uint16_t>(s, uv)},
                                   {"k", HostTensor::from<uint16_t>(Shape{1}, kv)}});
  for (size_t i = 0; i < xv.size(); ++i) {
    CHECK(out.at("shrink").as<float>()[i] == float(shrink(xv[i], 0.25, 0.125)));
    CHECK(out.at("atan").as<float>()[i] == doctest::Approx(std::atan(xv[i])).epsilon(1e-6));
    CHECK(out.at("shr").as<uint16_t>()[i] == uint16_t(uv[i] >> 2));
    CHECK(out.at("xor").as<uint16_t>()[i] == uint16_t(uv[i] ^ 2));
  }
}

TEST_CASE("Det: batches of odd sizes, 1x1, singular and pivoting matrices, f64") {
  for (const Shape& s : {Shape{2, 2}, Shape{3, 3, 3}, Shape{2, 1, 5, 5}, Shape{1, 1}, Shape{4, 9, 9}}) {
    CAPTURE(s.str());
    auto x = random_floats(size_t(s.numel()), 51, -2.0f, 2.0f);
    const int64_t n = s[s.rank() - 1];
    if (n >= 3 && s.numel() >= 2 * n * n) {
      for (int64_t j = 0; j < n; ++j) x[size_t(n * n + j)] = x[size_t(n * n + n + j)];  // matrix 1: two equal rows
      x[0] = 0.0f;  // matrix 0 needs a pivot swap
    }
    auto op = Det::create(ctx(), 0, {s, DType::f32});
    const Shape os = Det::validate({s, DType::f32});
    Tensor ws = ctx().alloc(Shape{int64_t(op->workspace_bytes() / 4)}, DType::f32);
    Tensor y = ctx().alloc(os, DType::f32);
    auto ec = ctx().exec();
    Tensor ins[] = {up(x, s)}, outs[] = {y};
    op->enqueue(ins, outs, &ws, ec);
    ctx().finish();
    auto got = down<float>(y);
    auto want = ref::det(std::vector<double>(x.begin(), x.end()), s.dims);
    std::vector<float> w(want.begin(), want.end());
    CLDL_CHECK_CLOSE(got.data(), w.data(), w.size(), n >= 9 ? 1e-4 : 1e-5, 1e-5);
  }
  expect_invalid([] { Det::validate({Shape{3, 4}, DType::f32}); }, {"Det", "square", "[3, 4]"});
  expect_invalid([] { Det::validate({Shape{3, 3}, DType::i32}); }, {"Det", "i32"});
  if (!supports_dtype(ctx().device(0).info, DType::f64)) return;
  const Shape s{3, 4, 4};
  auto xf = random_floats(48, 52, -3.0f, 3.0f);
  std::vector<double> x(xf.begin(), xf.end());
  auto op = Det::create(ctx(), 0, {s, DType::f64});
  Tensor ws = ctx().alloc(Shape{int64_t(op->workspace_bytes() / 4)}, DType::f32);
  Tensor y = ctx().alloc(Shape{3}, DType::f64);
  auto ec = ctx().exec();
  Tensor ins[] = {up(x, s)}, outs[] = {y};
  op->enqueue(ins, outs, &ws, ec);
  ctx().finish();
  auto got = down<double>(y);
  auto want = ref::det(x, s.dims);
  for (size_t i = 0; i < want.size(); ++i) REQUIRE(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
}

TEST_CASE("DynamicQuantizeLinear: mixed, all-positive, all-negative and all-zero data, ties, batch 1") {
  std::vector<std::vector<float>> cases = {
      random_floats(1000, 61, -3.0f, 5.0f), random_floats(37, 62, 0.5f, 2.0f), random_floats(5, 63, -4.0f, -1.0f),
      random_floats(300001, 64, -7.0f, 2.0f),  // many chunks, a short last one
      std::vector<float>(9, 0.0f), {0.0f, 2.55f, 1.275f, 0.005f, 0.015f, -0.0f}, {7.0f}};
  for (size_t k = 0; k < cases.size(); ++k) {
    CAPTURE(k);
    const auto& x = cases[k];
    const Shape s{1, int64_t(x.size())};
    auto op = DynamicQuantizeLinear::create(ctx(), 0, {s});
    Tensor y = ctx().alloc(s, DType::u8), sc = ctx().alloc(Shape{}, DType::f32), zp = ctx().alloc(Shape{}, DType::u8);
    auto ec = ctx().exec();
    Tensor ws = ctx().alloc(Shape{int64_t(op->workspace_bytes() / 4)}, DType::f32);
    Tensor ins[] = {up(x, s)}, outs[] = {y, sc, zp};
    op->enqueue(ins, outs, &ws, ec);
    ctx().finish();
    std::vector<uint8_t> want;
    float want_scale;
    uint8_t want_zp;
    ref::dynamic_quantize(x, want, want_scale, want_zp);
    CHECK(down<float>(sc)[0] == want_scale);
    CHECK(int(down<uint8_t>(zp)[0]) == int(want_zp));
    auto got = down<uint8_t>(y);
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(int(got[i]) == int(want[i]));
  }
}

TEST_CASE("constant inputs fold on the host to what the device computes") {
  using namespace graph;
  const Shape s{2, 5}, sb{5};
  std::vector<float> xf = random_floats(10, 71, -0.9f, 0.9f);
  std::vector<float> mf = random_floats(9, 72, -2.0f, 2.0f);
  std::vector<uint64_t> xu = random_ints<uint64_t>(10, 0, std::numeric_limits<uint64_t>::max(), 73);
  std::vector<uint64_t> ku = {0, 1, 63, 64, 200};
  std::vector<int8_t> xi = {-128, -1, 0, 1, 127, 55, -77, 3, 9, -9}, yi = {-1, 0, 15, -16, 85};
  auto build = [&](bool constant) {
    GraphBuilder b(constant ? "folded" : "device", 18);
    auto in = [&](const char* name, HostTensor t) {
      return constant ? b.constant(name, std::move(t)) : b.input(name, t.dtype(), t.shape());
    };
    auto x = in("x", HostTensor::from<float>(s, xf));
    auto m = in("m", HostTensor::from<float>(Shape{1, 3, 3}, mf));
    auto u = in("u", HostTensor::from<uint64_t>(s, xu));
    auto k = in("k", HostTensor::from<uint64_t>(sb, ku));
    auto i = in("i", HostTensor::from<int8_t>(s, xi));
    auto j = in("j", HostTensor::from<int8_t>(sb, yi));
    b.output(b.op1("Atanh", {x}), "atanh");
    b.output(b.op1("Shrink", {x}, {{"lambd", 0.3f}, {"bias", 0.1f}}), "shrink");
    b.output(b.op1("Det", {m}), "det");
    b.output(b.op1("BitShift", {u, k}, {{"direction", std::string("LEFT")}}), "shl");
    b.output(b.op1("BitShift", {u, k}, {{"direction", std::string("RIGHT")}}), "shr");
    b.output(b.op1("BitwiseAnd", {i, j}), "and");
    b.output(b.op1("BitwiseNot", {i}), "not");
    if (constant) {  // a runtime input keeps the graph non-empty
      auto z = b.input("z", DType::f32, Shape{1});
      b.output(b.op1("Identity", {z}), "zz");
    }
    return b.build();
  };
  check_folds_like_device(build,
                          {{"x", HostTensor::from<float>(s, xf)},
                           {"m", HostTensor::from<float>(Shape{1, 3, 3}, mf)},
                           {"u", HostTensor::from<uint64_t>(s, xu)},
                           {"k", HostTensor::from<uint64_t>(sb, ku)},
                           {"i", HostTensor::from<int8_t>(s, xi)},
                           {"j", HostTensor::from<int8_t>(sb, yi)}},
                          {"atanh", "shrink", "det", "shl", "shr", "and", "not"}, 1e-5, 1e-6);
  auto folded = run_graph(build(true), {{"z", random_tensor(Shape{1}, 1)}});
  CHECK(folded.at("shl").as<uint64_t>()[3] == 0);  // shift by 64
  CHECK(folded.at("shl").as<uint64_t>()[2] == xu[2] << 63);
}

}  // TEST_SUITE
