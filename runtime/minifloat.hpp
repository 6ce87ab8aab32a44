// Host encode/decode of the narrow float storage types: float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0),
// float4 e2m1 and bfloat16, with the rounding and saturation rules of ONNX Cast. kernels/common.cl
// has the same functions in OpenCL C (cast_encode_minifloat, ...); these are the reference its tests use.
#pragma once
#include <cstdint>
#include <string_view>

#include "runtime/tensor.hpp"

namespace cldl {

// ONNX Cast 'round_mode' for float8e8m0 targets (a power of two: only the exponent survives).
enum class E8M0Rounding : uint8_t { up, down, nearest };
E8M0Rounding parse_e8m0_rounding(std::string_view s);  // "up", "down", "nearest"; throws on others

// The float8 types and f4e2m1 (one code per byte; f4e2m1 uses the low 4 bits).
bool is_minifloat(DType t);

// The value of a code (every code has one: NaN codes give NaN, e8m0 0 gives 2^-127).
float minifloat_to_float(DType t, uint8_t code);

// Round to nearest even. Out of range (and +-Inf) gives the largest finite value with saturate, else
// Inf (e5m2) or NaN (e4m3fn, the FNUZ types). f4e2m1 has no Inf or NaN: it always saturates and NaN
// becomes 0x8, as the ONNX reference does. FNUZ types have no -0: what rounds to zero is 0x00, NaN 0x80.
// e8m0 ignores the sign, keeps only the exponent and rounds by `rounding`; Inf and NaN give 0xFF.
uint8_t float_to_minifloat(DType t, float x, bool saturate, E8M0Rounding rounding = E8M0Rounding::up);

float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float x);  // round to nearest even; NaN stays a (quiet) NaN

// Round a double to float "to odd" (toward zero, then set the last bit if anything was dropped): a
// second round-to-nearest-even to any type of at most 22 mantissa bits (f16, bf16, float8) then equals
// rounding the double directly, so f64 sources are not rounded twice.
float double_to_float_odd(double d);

}  // namespace cldl
