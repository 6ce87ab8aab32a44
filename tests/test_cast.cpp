// Cast: the host codecs of the narrow float types (runtime/minifloat.hpp) against the formats as the
// ONNX spec defines them (every code decoded from its sign / exponent / mantissa fields; f32 -> type
// rounding against a brute-force nearest-even search over all codes), then the device kernel against
// cast_host (models/op_registry.hpp) for every pair of storage types, bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "layers/elementwise.hpp"
#include "models/op_registry.hpp"
#include "reference/cnn_harness.hpp"
#include "models/npy.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::test;
using namespace cldl::graph;

namespace {

// The float8 / float4 formats as the ONNX spec (docs/Float8.md, Float4e2m1) states them.
struct Spec {
  DType t;
  int eb, mb, bias;
  bool ieee_inf;   // e5m2: exponent all ones is Inf (mantissa 0) or NaN
  bool fn_nan;     // e4m3fn: S.1111.111 is NaN
  bool uz;         // FNUZ: 0x80 is NaN, no -0
  int bits;        // 8 or 4
  double max;      // largest finite value
  double min_sub;  // smallest positive subnormal
};
const Spec kSpecs[] = {
    {DType::f8e4m3fn, 4, 3, 7, false, true, false, 8, 448.0, std::ldexp(1.0, -9)},
    {DType::f8e4m3fnuz, 4, 3, 8, false, false, true, 8, 240.0, std::ldexp(1.0, -10)},
    {DType::f8e5m2, 5, 2, 15, true, false, false, 8, 57344.0, std::ldexp(1.0, -16)},
    {DType::f8e5m2fnuz, 5, 2, 16, false, false, true, 8, 57344.0, std::ldexp(1.0, -17)},
    {DType::f4e2m1, 2, 1, 1, false, false, false, 4, 6.0, 0.5},
};

bool is_nan_code(const Spec& s, unsigned c) {
  const unsigned mag = c & ((1u << (s.bits - 1)) - 1), emax = (1u << s.eb) - 1;
  if (s.uz) return c == 0x80;
  if (s.fn_nan) return mag == (1u << (s.bits - 1)) - 1;
  if (s.ieee_inf) return (mag >> s.mb) == emax && (mag & ((1u << s.mb) - 1)) != 0;
  return false;
}

// Value of a code straight from the spec's fields.
double spec_value(const Spec& s, unsigned c) {
  if (is_nan_code(s, c)) return NAN;
  const bool neg = c >> (s.bits - 1);
  const unsigned mag = c & ((1u << (s.bits - 1)) - 1), e = mag >> s.mb, m = mag & ((1u << s.mb) - 1);
  double v;
  if (s.ieee_inf && e == (1u << s.eb) - 1) v = INFINITY;
  else if (e == 0) v = std::ldexp(double(m), 1 - s.bias - s.mb);
  else v = std::ldexp(1.0 + double(m) / (1 << s.mb), int(e) - s.bias);
  return neg ? -v : v;
}

// ONNX Cast of a float to the format, by search: the nearest finite magnitude, ties to the even code;
// with saturate |x| >= max gives max, without it rounding past max gives Inf (e5m2) or NaN.
unsigned brute_encode(const Spec& s, float x, bool saturate) {
  const unsigned sign = std::signbit(x) ? 1u << (s.bits - 1) : 0, half = 1u << (s.bits - 1);
  const unsigned nan = s.uz ? 0x80 : s.bits == 4 ? 0x8 : s.fn_nan ? sign | 0x7f : sign | 0x7e;
  unsigned maxc = 0;
  for (unsigned c = 0; c < half; ++c)
    if (!is_nan_code(s, c) && std::isfinite(spec_value(s, c))) maxc = c;
  const unsigned over = saturate || s.bits == 4 ? sign | maxc : s.ieee_inf ? sign | (maxc + 1) : nan;
  if (std::isnan(x)) return nan;
  const double a = std::fabs(double(x));
  if (std::isinf(x) || ((saturate || s.bits == 4) && a >= s.max)) return over;
  // Candidates: every finite magnitude plus, without saturation, the next step past max (overflow).
  const double top_step = s.max - spec_value(s, maxc - 1);
  if (a >= s.max + top_step) return over;  // past the first value beyond max (distances would round)
  unsigned best = 0;
  double best_d = INFINITY;
  for (unsigned c = 0; c <= maxc + 1; ++c) {
    double v = c <= maxc ? spec_value(s, c) : s.max + top_step;
    double d = std::fabs(v - a);
    if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
  }
  if (best > maxc) return over;
  if (best == 0 && s.uz) return 0;
  return sign | best;
}

// Edge values of a format: every value, the midpoints (ties) and one f32 ulp either side of them,
// beyond max, below the smallest subnormal, f32 subnormals, +-0, +-Inf, NaN.
std::vector<float> edge_values(const Spec& s) {
  std::vector<double> mags;
  for (unsigned c = 0; c < (1u << (s.bits - 1)); ++c)
    if (double v = spec_value(s, c); std::isfinite(v)) mags.push_back(v);
  std::sort(mags.begin(), mags.end());
  const double step = mags.back() - mags[mags.size() - 2];
  mags.push_back(s.max + step);  // the first value past max
  std::vector<float> out;
  for (size_t i = 0; i + 1 < mags.size(); ++i) {
    float mid = float((mags[i] + mags[i + 1]) / 2);
    for (float v : {float(mags[i]), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)})
      out.insert(out.end(), {v, -v});
  }
  for (float v : {float(s.max + step), float(s.max * 4), 1e30f, float(s.min_sub / 4), float(s.min_sub / 2),
                  std::nextafter(float(s.min_sub / 2), 1.0f), 1e-40f, 1e-45f, 0.0f, INFINITY})
    out.insert(out.end(), {v, -v});
  out.push_back(NAN);
  out.push_back(-NAN);
  return out;
}

HostTensor f32_tensor(const std::vector<float>& v) {
  return HostTensor::from<float>(Shape{int64_t(v.size())}, std::span<const float>(v));
}

uint8_t byte_at(const HostTensor& t, size_t i) { return static_cast<const uint8_t*>(t.data())[i]; }

// Runs the device Cast of a host tensor to `to`.
HostTensor device_cast(const HostTensor& x, DType to, bool saturate = true, E8M0Rounding r = E8M0Rounding::up) {
  auto op = Cast::create(ctx(), 0, {x.dtype(), to, x.shape(), saturate, r});
  return ctx().download(run_op(*op, {ctx().upload(x)}, x.shape(), to));
}

// Same element values (NaN equals NaN, -0 differs from +0), as the conformance test reads them.
void check_same_values(const HostTensor& got, const HostTensor& want, const std::string& what) {
  REQUIRE(got.dtype() == want.dtype());
  auto a = to_doubles(got), b = to_doubles(want);
  for (size_t i = 0; i < a.size(); ++i) {
    bool same = (std::isnan(a[i]) && std::isnan(b[i])) || (a[i] == b[i] && std::signbit(a[i]) == std::signbit(b[i]));
    if (!same) FAIL_CHECK(what << " element " << i << ": got " << a[i] << ", want " << b[i]);
  }
}

const DType kAllTypes[] = {DType::f32, DType::f16, DType::i32, DType::i64, DType::u8, DType::boolean,
                           DType::i8, DType::i16, DType::u16, DType::u32, DType::u64, DType::f64,
                           DType::bf16, DType::f8e4m3fn, DType::f8e4m3fnuz, DType::f8e5m2, DType::f8e5m2fnuz,
                           DType::f8e8m0, DType::i4, DType::u4, DType::f4e2m1, DType::i2, DType::u2};
static_assert(std::size(kAllTypes) == size_t(kDTypeCount));

bool is_float_type(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::f64 || t == DType::bf16 || is_minifloat(t);
}

}  // namespace

TEST_SUITE("cast") {

TEST_CASE("every float8 / float4 code decodes as the spec's fields say") {
  for (const Spec& s : kSpecs) {
    CAPTURE(to_string(s.t));
    for (unsigned c = 0; c < (1u << s.bits); ++c) {
      CAPTURE(c);
      const double want = spec_value(s, c);
      const float got = minifloat_to_float(s.t, uint8_t(c));
      if (std::isnan(want)) {
        CHECK(std::isnan(got));
      } else {
        CHECK(double(got) == want);
        CHECK(std::signbit(got) == std::signbit(want));
      }
    }
    // The spec's landmarks: largest finite value and smallest subnormal.
    double mx = 0, mn = INFINITY;
    for (unsigned c = 0; c < (1u << s.bits); ++c)
      if (double v = minifloat_to_float(s.t, uint8_t(c)); std::isfinite(v)) {
        mx = std::max(mx, v);
        if (v > 0) mn = std::min(mn, v);
      }
    CHECK(mx == s.max);
    CHECK(mn == s.min_sub);
  }
  // NaN codes: e4m3fn 0x7f/0xff only, FNUZ 0x80 only, e5m2 the IEEE ones (and 0x7c is Inf).
  CHECK(std::isnan(minifloat_to_float(DType::f8e4m3fn, 0x7f)));
  CHECK(minifloat_to_float(DType::f8e4m3fn, 0x7e) == 448.0f);
  CHECK(std::isnan(minifloat_to_float(DType::f8e4m3fnuz, 0x80)));
  CHECK(minifloat_to_float(DType::f8e4m3fnuz, 0xff) == -240.0f);
  CHECK(minifloat_to_float(DType::f8e5m2, 0x7c) == INFINITY);
  CHECK(std::isnan(minifloat_to_float(DType::f8e5m2, 0x7d)));
  CHECK(minifloat_to_float(DType::f4e2m1, 0x8) == 0.0f);
  CHECK(std::signbit(minifloat_to_float(DType::f4e2m1, 0x8)));
  // e8m0: 2^(code - 127), 0xff NaN.
  for (unsigned c = 0; c < 255; ++c) CHECK(minifloat_to_float(DType::f8e8m0, uint8_t(c)) == std::ldexp(1.0f, int(c) - 127));
  CHECK(std::isnan(minifloat_to_float(DType::f8e8m0, 0xff)));
}

TEST_CASE("f32 -> float8 / float4 rounds to nearest even and saturates as ONNX Cast says") {
  for (const Spec& s : kSpecs)
    for (bool sat : {true, false}) {
      CAPTURE(to_string(s.t));
      CAPTURE(sat);
      for (float x : edge_values(s)) {
        CAPTURE(x);
        CHECK(unsigned(float_to_minifloat(s.t, x, sat)) == brute_encode(s, x, sat));
      }
    }
  // Spot checks of the spec's table: Inf saturates to max, or gives Inf / NaN without saturate.
  CHECK(float_to_minifloat(DType::f8e4m3fn, INFINITY, true) == 0x7e);
  CHECK(float_to_minifloat(DType::f8e4m3fn, -INFINITY, false) == 0xff);
  CHECK(float_to_minifloat(DType::f8e5m2, INFINITY, false) == 0x7c);
  CHECK(float_to_minifloat(DType::f8e5m2fnuz, -1e-30f, true) == 0x00);  // no -0
  CHECK(float_to_minifloat(DType::f8e4m3fnuz, NAN, true) == 0x80);
  CHECK(float_to_minifloat(DType::f8e4m3fn, 464.0f, false) == 0x7e);  // tie between 448 and 480: even
  CHECK(float_to_minifloat(DType::f4e2m1, 0.25f, false) == 0x0);      // tie between 0 and 0.5: even
  CHECK(float_to_minifloat(DType::f4e2m1, 0.75f, false) == 0x2);      // tie between 0.5 and 1: even
}

TEST_CASE("f32 -> e8m0 keeps the exponent: up, down and nearest") {
  for (float x : {1.0f, 1.1f, 1.5f, 1.4999f, 3.0f, 0.124f, 0.75f, 1e-30f, 3e38f, 1.7e38f, -2.5f}) {
    CAPTURE(x);
    const double a = std::fabs(double(x));
    const int e = std::ilogb(a);  // 2^e <= a < 2^(e+1)
    const bool exact = a == std::ldexp(1.0, e);
    int up = exact ? e : e + 1, down = e, near = a >= 1.5 * std::ldexp(1.0, e) ? e + 1 : e;
    auto code = [](int k) { return unsigned(std::min(k + 127, 0xfe)); };  // saturated at 2^127
    CHECK(unsigned(float_to_minifloat(DType::f8e8m0, x, true, E8M0Rounding::up)) == code(up));
    CHECK(unsigned(float_to_minifloat(DType::f8e8m0, x, true, E8M0Rounding::down)) == code(down));
    CHECK(unsigned(float_to_minifloat(DType::f8e8m0, x, true, E8M0Rounding::nearest)) == code(near));
  }
  CHECK(float_to_minifloat(DType::f8e8m0, 3e38f, false, E8M0Rounding::up) == 0xff);  // past 2^127: NaN
  CHECK(float_to_minifloat(DType::f8e8m0, INFINITY, true) == 0xff);
  CHECK(float_to_minifloat(DType::f8e8m0, NAN, true) == 0xff);
  CHECK(float_to_minifloat(DType::f8e8m0, 0.0f, true) == 0x00);
  CHECK(parse_e8m0_rounding("nearest") == E8M0Rounding::nearest);
  CHECK_THROWS_AS(parse_e8m0_rounding("even"), Error);
}

TEST_CASE("bf16 and f16 round to nearest even, also from f64 without rounding twice") {
  // Independent rounding: scale the mantissa to an integer and let nearbyint (to even) round it.
  auto nearest = [](double x, int mant_bits) {
    const int e = std::ilogb(x);
    return std::ldexp(std::nearbyint(std::ldexp(x, mant_bits - e)), e - mant_bits);
  };
  for (double x : {1.0 + std::ldexp(1.0, -8), 1.0 + 3 * std::ldexp(1.0, -8), 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40),
                   -3.14159, 65504.0, 1e-3, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40),
                   1.0 + std::ldexp(1.0, -11), 1.0 + 3 * std::ldexp(1.0, -11)}) {
    CAPTURE(x);
    CHECK(double(bf16_to_float(float_to_bf16(double_to_float_odd(x)))) == nearest(x, 7));
    CHECK(double(half_to_float(float_to_half(double_to_float_odd(x)))) == nearest(x, 10));
  }
  CHECK(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  CHECK(bf16_to_float(float_to_bf16(INFINITY)) == INFINITY);
  CHECK(float_to_bf16(3.4e38f) == 0x7f80);  // rounds up past the largest bf16: Inf
  CHECK(double_to_float_odd(1e300) == std::nextafter(INFINITY, 0.0f));
}

TEST_CASE("device Cast f32 -> every narrow float matches the host, saturate on and off") {
  for (const Spec& s : kSpecs)
    for (bool sat : {true, false}) {
      CAPTURE(to_string(s.t));
      CAPTURE(sat);
      HostTensor x = f32_tensor(edge_values(s));
      HostTensor got = device_cast(x, s.t, sat), want = cast_host(x, s.t, sat);
      for (int64_t i = 0; i < x.numel(); ++i) {
        CAPTURE(x.as<float>()[i]);
        CHECK(unsigned(byte_at(got, i)) == unsigned(byte_at(want, i)));
      }
      // Every code back to f32 on the device: the host decode.
      HostTensor codes(s.t, Shape{int64_t(1) << s.bits});
      for (int c = 0; c < (1 << s.bits); ++c) static_cast<uint8_t*>(codes.data())[c] = uint8_t(c);
      check_same_values(device_cast(codes, DType::f32), cast_host(codes, DType::f32), "decode");
    }
  std::vector<float> e8 = {0.0f, 1e-40f, 0.124f, 0.25f, 0.75f, 1.1f, 1.5f, 3e38f, 1.7e38f, -2.5f, INFINITY, NAN};
  for (auto r : {E8M0Rounding::up, E8M0Rounding::down, E8M0Rounding::nearest})
    for (bool sat : {true, false}) {
      HostTensor x = f32_tensor(e8), got = device_cast(x, DType::f8e8m0, sat, r), want = cast_host(x, DType::f8e8m0, sat, r);
      for (size_t i = 0; i < e8.size(); ++i) CHECK(unsigned(byte_at(got, i)) == unsigned(byte_at(want, i)));
    }
  HostTensor all(DType::f8e8m0, Shape{256});
  for (int c = 0; c < 256; ++c) static_cast<uint8_t*>(all.data())[c] = uint8_t(c);
  check_same_values(device_cast(all, DType::f32), cast_host(all, DType::f32), "e8m0 decode");
}

TEST_CASE("device Cast between every pair of storage types matches cast_host") {
  const bool fp64 = ctx().device(0).info.fp64;
  // Finite values every type holds some of: ties, fractions, negatives (wrapping into unsigned types).
  std::vector<float> base = {0.0f, 1.0f, -1.0f, 2.5f, -2.5f, 0.5f, 1.5f, 3.75f, -7.9f, 9.0f, 15.0f, -8.0f,
                             0.3f, 100.25f, -100.75f, 127.0f, 200.0f, 6.0f, 0.0078125f, 17.0f, -33.0f};
  // Specials for float -> float pairs (float -> integer of NaN / Inf is undefined in ONNX).
  std::vector<float> special = {NAN, INFINITY, -INFINITY, -0.0f, 1e30f, -1e30f, 1e-30f, 65519.0f, 65520.0f, 3.4e38f};
  HostTensor b = f32_tensor(base), sp = f32_tensor(special);
  int pairs = 0;
  for (DType from : kAllTypes)
    for (DType to : kAllTypes) {
      if (!fp64 && (from == DType::f64 || to == DType::f64)) continue;
      CAPTURE(to_string(from));
      CAPTURE(to_string(to));
      HostTensor x = cast_host(b, from);
      check_same_values(device_cast(x, to), cast_host(x, to), "finite");
      if (is_float_type(from) && is_float_type(to)) {
        HostTensor y = cast_host(sp, from);
        check_same_values(device_cast(y, to, false), cast_host(y, to, false), "special, no saturate");
        check_same_values(device_cast(y, to, true), cast_host(y, to, true), "special, saturate");
      }
      ++pairs;
    }
  CHECK(pairs == (fp64 ? 23 * 23 : 22 * 22));
  if (!fp64)
    expect_invalid([] { Cast::create(ctx(), 0, {DType::f16, DType::f64, Shape{2}}); }, {"Cast", "f64", "cl_khr_fp64"});
}

TEST_CASE("host cast: sub-byte integer targets wrap, f64 -> f16 rounds once") {
  HostTensor x = f32_tensor({-9.0f, -8.0f, 7.0f, 8.0f, 15.0f, 16.0f, -3.0f, 2.9f, -2.9f});
  auto i4 = cast_host(x, DType::i4), u4 = cast_host(x, DType::u4), i2 = cast_host(x, DType::i2), u2 = cast_host(x, DType::u2);
  const int8_t want_i4[] = {7, -8, 7, -8, -1, 0, -3, 2, -2};
  const uint8_t want_u4[] = {7, 8, 7, 8, 15, 0, 13, 2, 14};
  const int8_t want_i2[] = {-1, 0, -1, 0, -1, 0, 1, -2, -2};
  const uint8_t want_u2[] = {3, 0, 3, 0, 3, 0, 1, 2, 2};
  for (int i = 0; i < 9; ++i) {
    CAPTURE(i);
    CHECK(static_cast<const int8_t*>(i4.data())[i] == want_i4[i]);
    CHECK(static_cast<const uint8_t*>(u4.data())[i] == want_u4[i]);
    CHECK(static_cast<const int8_t*>(i2.data())[i] == want_i2[i]);
    CHECK(static_cast<const uint8_t*>(u2.data())[i] == want_u2[i]);
  }
  // 1 + 2^-11 + 2^-40 is just above an f16 tie: rounded to float first it would sit on the tie and go
  // down to 1; rounded once it goes up.
  const double d = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  HostTensor x64 = HostTensor::from<double>(Shape{1}, std::span<const double>(&d, 1));
  CHECK(to_doubles(cast_host(x64, DType::f16))[0] == 1.0 + std::ldexp(1.0, -10));
  if (ctx().device(0).info.fp64) CHECK(to_doubles(device_cast(x64, DType::f16))[0] == 1.0 + std::ldexp(1.0, -10));
}

TEST_CASE("a Cast node folds a constant at load with saturate and round_mode as the device runs it") {
  HostTensor c = f32_tensor({1e6f, -1e6f, 0.3f, 1.5f, 1.1f, INFINITY, 460.0f, 470.0f, -0.0f, 3e38f});
  struct Case {
    int64_t to;
    DType dt;
    int64_t saturate;
    std::string mode;
  };
  for (const Case& k : {Case{17, DType::f8e4m3fn, 0, "up"}, Case{19, DType::f8e5m2, 0, "up"},
                        Case{20, DType::f8e5m2fnuz, 1, "up"}, Case{24, DType::f8e8m0, 1, "down"},
                        Case{24, DType::f8e8m0, 0, "nearest"}, Case{10, DType::f16, 1, "up"}}) {
    CAPTURE(to_string(k.dt));
    CAPTURE(k.saturate);
    const std::map<std::string, graph::AttrValue> attrs{{"to", k.to}, {"saturate", k.saturate}, {"round_mode", k.mode}};
    graph::GraphBuilder fb;  // the input is a constant: folded on the host at load
    fb.output(fb.op1("Cast", {fb.constant("c", c)}, attrs), "y");
    graph::Graph fg = fb.build();
    CHECK(graph::prepare(fg).folded_nodes >= 1);
    for (const auto& n : fg.nodes) CHECK(n.op_type != "Cast");
    HostTensor folded = graph::CompiledModel::compile(shared_ctx(), std::move(fg))->session()->run({}).at("y");
    graph::GraphBuilder db;  // the input is fed at run time: the device kernel
    db.output(db.op1("Cast", {db.input("x", DType::f32, c.shape())}, attrs), "y");
    HostTensor ran = run_graph(db.build(), {{"x", c}}).at("y");
    HostTensor want = cast_host(c, k.dt, k.saturate != 0, parse_e8m0_rounding(k.mode));
    REQUIRE(folded.dtype() == k.dt);
    REQUIRE(ran.dtype() == k.dt);
    CHECK(std::memcmp(folded.data(), want.data(), want.bytes()) == 0);
    CHECK(std::memcmp(ran.data(), want.data(), want.bytes()) == 0);
  }
  graph::GraphBuilder bad;
  bad.output(bad.op1("Cast", {bad.input("x", DType::f32, Shape{2})}, {{"to", int64_t(24)}, {"round_mode", std::string("even")}}), "y");
  std::string msg = error_of([&] { run_graph(bad.build(), {{"x", f32_tensor({1.0f, 2.0f})}}); });
  CHECK(msg.find("Cast") != std::string::npos);
  CHECK(msg.find("round_mode 'even'") != std::string::npos);
}

}  // TEST_SUITE

TEST_SUITE("cast") {
  TEST_CASE("cldl run -o writes a bf16 output as an ONNX TensorProto (.pb), and --format npy refuses it") {
    const std::string dir = test::temp_dir("pb-out");
    graph::GraphBuilder b("bf16_out", 17);
    auto x = b.input("x", DType::f32, Shape{2, 3});
    b.output(b.op1("Cast", {x}, {{"to", int64_t(16)}}), "y");  // 16: bfloat16
    graph::export_onnx_file(b.build(), dir + "/m.onnx");
    HostTensor xv = HostTensor::from<float>(Shape{2, 3}, std::vector<float>{1.0f, -2.5f, 3.140625f, 0.0f, 1e10f, -7.0f});
    graph::write_npy(xv, dir + "/x.npy");
    const std::string run = std::string(CLDL_CLI_PATH) + " run " + dir + "/m.onnx --device " + test::device_spec() +
                            " -i x=" + dir + "/x.npy -o " + dir + "/out";
    std::string out;
    REQUIRE_MESSAGE(test::run_command(run, out) == 0, out);
    CHECK(out.find("ONNX TensorProto") != std::string::npos);
    HostTensor y = graph::read_tensor_file(dir + "/out/y.pb");
    REQUIRE(y.dtype() == DType::bf16);
    REQUIRE(y.shape() == Shape{2, 3});
    HostTensor want = graph::cast_host(xv, DType::bf16);
    CHECK(std::memcmp(y.data(), want.data(), want.bytes()) == 0);
    CHECK(test::run_command(run + " --format npy", out) != 0);
    CHECK(out.find("--format pb") != std::string::npos);
    std::filesystem::remove_all(dir);
  }
}
