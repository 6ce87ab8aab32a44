// Narrow float codecs (see minifloat.hpp). One generic rounding routine serves every float8 / float4
// format, parameterised by exponent bits, mantissa bits, bias and how the format spells Inf and NaN;
// kernels/common.cl mirrors it line for line (used by Cast and the quantization kernels).
#include "runtime/minifloat.hpp"

#include <bit>
#include <cmath>

namespace cldl {

namespace {
enum class Special { fn, ieee, uz, none };  // e4m3fn; e5m2; the FNUZ types; f4e2m1

struct Format {
  int eb, mb, bias;
  Special kind;
};

Format format_of(DType t) {
  switch (t) {
    case DType::f8e4m3fn: return {4, 3, 7, Special::fn};
    case DType::f8e4m3fnuz: return {4, 3, 8, Special::uz};
    case DType::f8e5m2: return {5, 2, 15, Special::ieee};
    case DType::f8e5m2fnuz: return {5, 2, 16, Special::uz};
    case DType::f4e2m1: return {2, 1, 1, Special::none};
    default: fail("minifloat: {} is not a float8/float4 format", to_string(t));
  }
}

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

uint8_t encode(const Format& f, float x, bool saturate) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (b >> 31) << (f.eb + f.mb), a = b & 0x7fffffffu;
  const uint32_t ones = (1u << (f.eb + f.mb)) - 1;
  const uint32_t maxc = f.kind == Special::fn     ? ones - 1
                        : f.kind == Special::ieee ? (((1u << f.eb) - 1) << f.mb) - 1
                                                  : ones;
  const uint32_t nan_code = f.kind == Special::fn     ? sign | ones
                       : f.kind == Special::ieee ? sign | (maxc + 3)
                       : f.kind == Special::uz   ? 0x80u
                                                 : 0x8u;
  const uint32_t over = saturate || f.kind == Special::none ? sign | maxc
                        : f.kind == Special::ieee           ? sign | (maxc + 1)
                                                            : nan_code;
  if (a > 0x7f800000u) return uint8_t(nan_code);
  if (a == 0x7f800000u) return uint8_t(over);
  const int e = int(a >> 23);
  uint32_t code = 0;
  if (e != 0) {  // f32 subnormals are far below half the smallest subnormal of every format: 0
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const int et = e - 127 + f.bias;  // biased exponent in the target format
    const int shift = 23 - f.mb + (et < 1 ? 1 - et : 0);
    if (shift <= 24) {
      uint32_t q = m >> shift;
      const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (q & 1))) ++q;
      // Normal: (et - 1) << mb plus q (which holds the implicit bit), so a carry moves the exponent.
      code = et < 1 ? q : (uint32_t(et - 1) << f.mb) + q;
    }
  }
  if (code > maxc) return uint8_t(over);
  if (code == 0 && f.kind == Special::uz) return 0;
  return uint8_t(sign | code);
}

float decode(const Format& f, uint32_t c) {
  const uint32_t sbit = 1u << (f.eb + f.mb), mag = c & (sbit - 1);
  const bool neg = (c & sbit) != 0;
  if (f.kind == Special::uz && c == 0x80) return NAN;
  if (f.kind == Special::fn && mag == sbit - 1) return NAN;
  const uint32_t e = mag >> f.mb, m = mag & ((1u << f.mb) - 1);
  if (f.kind == Special::ieee && e == (1u << f.eb) - 1) return m ? NAN : neg ? -INFINITY : INFINITY;
  // Subnormal: m * 2^(1 - bias - mb); normal: the exponent and mantissa bits moved into f32's fields.
  float v = e == 0 ? float(m) * from_bits(uint32_t(127 + 1 - f.bias - f.mb) << 23)
                   : from_bits((uint32_t(int(e) - f.bias + 127) << 23) | (m << (23 - f.mb)));
  return neg ? -v : v;
}

uint8_t encode_e8m0(float x, bool saturate, E8M0Rounding mode) {
  // Follows onnx.numpy_helper.to_float8e8m0 bit for bit (including its tie rule for "nearest").
  const uint32_t b = std::bit_cast<uint32_t>(x), e = (b >> 23) & 0xff;
  if (e == 0xff) return 0xff;
  bool up = false;
  if (mode == E8M0Rounding::up) {
    up = (b & 0x7fffffu) != 0;
  } else if (mode == E8M0Rounding::nearest) {
    const bool g = b & 0x400000u, r = b & 0x200000u, s = (b & 0x1fffffu) != 0, lsb = e > 0;
    up = g && (r || s || lsb);
  }
  if (up && e == 0xfe && saturate) up = false;
  return uint8_t(e + (up ? 1 : 0));
}
}  // namespace

E8M0Rounding parse_e8m0_rounding(std::string_view s) {
  if (s == "up") return E8M0Rounding::up;
  if (s == "down") return E8M0Rounding::down;
  if (s == "nearest") return E8M0Rounding::nearest;
  fail("round_mode '{}' is not one of up, down, nearest", s);
}

bool is_minifloat(DType t) {
  switch (t) {
    case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz:
    case DType::f8e8m0: case DType::f4e2m1: return true;
    default: return false;
  }
}

float minifloat_to_float(DType t, uint8_t code) {
  if (t == DType::f8e8m0) return code == 0xff ? NAN : std::ldexp(1.0f, int(code) - 127);
  return decode(format_of(t), code);
}

uint8_t float_to_minifloat(DType t, float x, bool saturate, E8M0Rounding rounding) {
  if (t == DType::f8e8m0) return encode_e8m0(x, saturate, rounding);
  return encode(format_of(t), x, saturate);
}

float bf16_to_float(uint16_t b) { return from_bits(uint32_t(b) << 16); }

uint16_t float_to_bf16(float x) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40);
  return uint16_t((b + 0x7fffu + ((b >> 16) & 1)) >> 16);
}

float double_to_float_odd(double d) {
  float f = float(d);
  if (std::isnan(d) || double(f) == d) return f;
  if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // toward zero
  return from_bits(std::bit_cast<uint32_t>(f) | 1u);
}

}  // namespace cldl
