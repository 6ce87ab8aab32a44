// Element-wise ops: unary (activations and math), binary with numpy broadcasting, Where, Cast.
// One kernel per arity; the op is a runtime argument (a uniform switch, cheap next to memory traffic)
// so one build per element type serves every op. Macros (set by layers/elementwise.cpp):
//   T_IN      storage type of the elements (float, double, half, ushort for bf16, char ... ulong, uchar)
//   T_CALC    arithmetic type (T_IN; float for half and bf16 storage: f32 compute, f16/bf16 storage)
//   T_UW      unsigned type at least 32 bits wide that integer +, -, * wrap in (uint or ulong)
//   IS_FLOAT  1 when T_CALC is float or double;  IS_SIGNED 1 for signed integers
//   STORAGE   0 plain, 1 half (vload_half / vstore_half: core OpenCL, no cl_khr_fp16), 2 bf16
//   USE_FP64  1 in the double build (the host checks the device's cl_khr_fp64 first)
// `binary` writes T_IN (arithmetic), `compare` writes bool as uchar (comparisons and logic).
// Broadcasting: the host collapses the shape and passes per-operand strides as long8 (0 on broadcast
// dims); the range is 3-D: the innermost dim, the next one, and the product of the others.

#if USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T_IN
#define T_IN float
#endif
#ifndef T_CALC
#define T_CALC T_IN
#endif
#ifndef T_UW
#define T_UW uint
#endif
#ifndef IS_FLOAT
#define IS_FLOAT 1
#endif
#ifndef IS_SIGNED
#define IS_SIGNED 1
#endif
#ifndef STORAGE
#define STORAGE 0
#endif

#if STORAGE == 1
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half_rte((v), (i), (p))
#elif STORAGE == 2
// bf16: the high half of an f32; stores round to nearest even (cast_encode_bf16 of common.cl).
#define LOAD(p, i) as_float((uint)(p)[i] << 16)
#define STORE(p, i, v) ((p)[i] = cast_encode_bf16(v))
#else
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
#endif

// Unary op codes (0..31 are the ACT_* activations of common.cl); match layers/elementwise.hpp.
#define U_ABS 32
#define U_NEG 33
#define U_EXP 34
#define U_LOG 35
#define U_SQRT 36
#define U_RECIPROCAL 37
#define U_FLOOR 38
#define U_CEIL 39
#define U_ROUND 40
#define U_SIGN 41
#define U_ERF 42
#define U_SIN 43
#define U_COS 44
#define U_NOT 45
#define U_SINH 46
#define U_COSH 47
// Float class tests (unary_test, bool output): IsNaN; IsInf = U_ISINF_NONE + (1 positive | 2 negative).
#define U_ISNAN 48
#define U_ISINF_NONE 52
#define U_TAN 56
#define U_ASIN 57
#define U_ACOS 58
#define U_ATAN 59
#define U_ASINH 60
#define U_ACOSH 61
#define U_ATANH 62
#define U_SHRINK 63
#define U_BITWISE_NOT 64

// Binary op codes.
#define B_ADD 0
#define B_SUB 1
#define B_MUL 2
#define B_DIV 3
#define B_POW 4
#define B_MAX 5
#define B_MIN 6
#define B_MOD 7
#define B_FMOD 8
#define B_PRELU 9
#define B_EQUAL 10
#define B_LESS 11
#define B_LESS_EQUAL 12
#define B_GREATER 13
#define B_GREATER_EQUAL 14
#define B_AND 15
#define B_OR 16
#define B_XOR 17
#define B_BIT_AND 18
#define B_BIT_OR 19
#define B_BIT_XOR 20
#define B_BIT_SHL 21
#define B_BIT_SHR 22


// a, b: the activation's alpha / beta, or Clip's bounds, in T_CALC (exact for f64 and integer bounds).
inline T_CALC unary_apply(int op, T_CALC x, T_CALC a, T_CALC b) {
  switch (op) {
#if IS_FLOAT
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_RECIPROCAL: return (T_CALC)1 / x;
    case U_FLOOR: return floor(x);
    case U_CEIL: return ceil(x);
    case U_ROUND: return rint(x);  // ONNX Round: halves to even
#if USE_FP64
    case U_ERF: return erf(x);
#else
    case U_ERF: return cldl_erf(x);  // f32 compute (f16 / bf16 storage too)
#endif
    case U_SIN: return sin(x);
    case U_COS: return cos(x);
    case U_SINH: return sinh(x);
    case U_COSH: return cosh(x);
    case U_ABS: return fabs(x);
    case U_SIGN: return x > 0 ? (T_CALC)1 : (x < 0 ? (T_CALC)-1 : (T_CALC)0);
    case U_NEG: return -x;
    case U_TAN: return tan(x);
    case U_ASIN: return asin(x);
    case U_ACOS: return acos(x);
    case U_ATAN: return atan(x);
    case U_ASINH: return asinh(x);
    case U_ACOSH: return acosh(x);
    case U_ATANH: return atanh(x);
    case U_SHRINK: return x < -a ? x + b : (x > a ? x - b : (T_CALC)0);  // a = lambd, b = bias
    // Exact in any float type; the host admits only these activations for f64.
    case ACT_NONE: return x;
    case ACT_RELU: return x > 0 ? x : (T_CALC)0;
    case ACT_LEAKY_RELU: return x >= 0 ? x : a * x;
    case ACT_CLIP: return fmin(fmax(x, a), b);
    default: return cldl_act(op, x, a, b);
#else
    case U_ABS: return IS_SIGNED && x < 0 ? (T_CALC)((T_UW)0 - (T_UW)x) : x;
    case U_SIGN: return (T_CALC)(x > 0 ? 1 : (x < 0 ? -1 : 0));
    case U_NEG: return (T_CALC)((T_UW)0 - (T_UW)x);
    case U_NOT: return (T_CALC)(x == 0);
    case U_BITWISE_NOT: return (T_CALC)~x;
    case ACT_RELU: return x > 0 ? x : (T_CALC)0;
    case ACT_CLIP: return x < a ? a : (x > b ? b : x);
    default: return x;
#endif
  }
}

__kernel void unary(int op, T_CALC a, T_CALC b, long n, __global const T_IN* x, long x_off, __global T_IN* y,
                    long y_off) {
  const long i = get_global_id(0);
  if (i < n) STORE(y, y_off + i, unary_apply(op, LOAD(x, x_off + i), a, b));
}

// IsNaN / IsInf (the host admits float types only).
__kernel void unary_test(int op, long n, __global const T_IN* x, long x_off, __global uchar* y, long y_off) {
  const long i = get_global_id(0);
  if (i >= n) return;
#if IS_FLOAT
  const T_CALC v = LOAD(x, x_off + i);
  const int sides = op - U_ISINF_NONE;  // 1 positive, 2 negative
  y[y_off + i] = op == U_ISNAN ? (isnan(v) ? 1 : 0) : (isinf(v) && (sides & (v > 0 ? 1 : 2))) ? 1 : 0;
#else
  y[y_off + i] = 0;
#endif
}

#if !IS_FLOAT
// Integer power by squaring, wrapping like the other integer ops (numpy's int power); a negative
// exponent gives 1 / a truncated: 0 except for a = 1 or -1.
inline T_CALC ipow(T_CALC a, T_CALC e) {
#if IS_SIGNED
  if (e < 0) return a == 1 ? (T_CALC)1 : (a == -1 ? (T_CALC)((e & 1) ? -1 : 1) : (T_CALC)0);
#endif
  T_UW r = 1, base = (T_UW)a;
  ulong k = (ulong)e;
  while (k) {
    if (k & 1) r *= base;
    base *= base;
    k >>= 1;
  }
  return (T_CALC)r;
}
#endif

inline T_CALC binary_apply(int op, T_CALC a, T_CALC b) {
  switch (op) {
#if IS_FLOAT
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    case B_POW: return pow(a, b);
    case B_MOD: {  // Python semantics: the result takes the divisor's sign
      T_CALC r = fmod(a, b);
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case B_FMOD: return fmod(a, b);
    case B_PRELU: return a < 0 ? a * b : a;
#else
    // +, -, * wrap (numpy): computed in an unsigned type, where overflow is defined.
    case B_ADD: return (T_CALC)((T_UW)a + (T_UW)b);
    case B_SUB: return (T_CALC)((T_UW)a - (T_UW)b);
    case B_MUL: return (T_CALC)((T_UW)a * (T_UW)b);
    case B_PRELU: return a < 0 ? (T_CALC)((T_UW)a * (T_UW)b) : a;
    case B_POW: return ipow(a, b);
    // Division truncates toward zero (ONNX). By zero it is undefined in ONNX and traps on CPUs: 0 here.
    // MIN / -1 also traps; it wraps to MIN as numpy's does.
    case B_DIV:
      if (b == 0) return 0;
#if IS_SIGNED
      if (b == -1) return (T_CALC)((T_UW)0 - (T_UW)a);
#endif
      return a / b;
    case B_MOD: {  // the divisor's sign
      if (b == 0) return 0;
#if IS_SIGNED
      if (b == -1) return 0;
#endif
      T_CALC r = a % b;
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case B_FMOD:  // the dividend's sign (C's %)
#if IS_SIGNED
      if (b == -1) return 0;
#endif
      return b == 0 ? 0 : a % b;
    case B_BIT_AND: return a & b;
    case B_BIT_OR: return a | b;
    case B_BIT_XOR: return a ^ b;
    // BitShift (unsigned types only): C leaves a shift by the width or more undefined; it gives 0 here,
    // as if the bits were shifted out one at a time (numpy's result).
    case B_BIT_SHL: return (ulong)b >= 8 * sizeof(T_CALC) ? (T_CALC)0 : (T_CALC)(a << b);
    case B_BIT_SHR: return (ulong)b >= 8 * sizeof(T_CALC) ? (T_CALC)0 : (T_CALC)(a >> b);
#endif
    case B_MAX: return a > b ? a : b;
    case B_MIN: return a < b ? a : b;
    default: return 0;
  }
}

inline uchar compare_apply(int op, T_CALC a, T_CALC b) {
  switch (op) {
    case B_EQUAL: return a == b;
    case B_LESS: return a < b;
    case B_LESS_EQUAL: return a <= b;
    case B_GREATER: return a > b;
    case B_GREATER_EQUAL: return a >= b;
    case B_AND: return (a != 0) && (b != 0);
    case B_OR: return (a != 0) || (b != 0);
    case B_XOR: return (a != 0) != (b != 0);
    default: return 0;
  }
}

// 3-D range (innermost dim, second-innermost dim, the rest flattened): the two inner coordinates come
// straight from the ids with scalar strides (ia / ma ...), so only dims beyond the third need div/mod.
#define OFF3(off, s, i_, m_) ((off) + nd_offset(get_global_id(2), rank - 2, dims, s) + \
                              (long)get_global_id(1) * (m_) + (long)get_global_id(0) * (i_))

__kernel void binary(int op, int rank, long8 dims, long inner, __global const T_IN* a, long a_off, long8 sa, long ma, long ia,
                     __global const T_IN* b, long b_off, long8 sb, long mb, long ib, __global T_IN* c, long c_off,
                     long8 sc, long mc, long ic) {
  if ((long)get_global_id(0) >= inner) return;
  STORE(c, OFF3(c_off, sc, ic, mc), binary_apply(op, LOAD(a, OFF3(a_off, sa, ia, ma)), LOAD(b, OFF3(b_off, sb, ib, mb))));
}

__kernel void compare(int op, int rank, long8 dims, long inner, __global const T_IN* a, long a_off, long8 sa, long ma,
                      long ia, __global const T_IN* b, long b_off, long8 sb, long mb, long ib, __global uchar* c,
                      long c_off, long8 sc, long mc, long ic) {
  if ((long)get_global_id(0) >= inner) return;
  c[OFF3(c_off, sc, ic, mc)] = compare_apply(op, LOAD(a, OFF3(a_off, sa, ia, ma)), LOAD(b, OFF3(b_off, sb, ib, mb)));
}

// Where(cond, x, y) with three-way broadcasting; cond is bool (uchar).
__kernel void where_select(int rank, long8 dims, long inner, __global const uchar* cond, long k_off, long8 sk, long mk, long ik,
                           __global const T_IN* a, long a_off, long8 sa, long ma, long ia, __global const T_IN* b,
                           long b_off, long8 sb, long mb, long ib, __global T_IN* c, long c_off, long8 sc, long mc,
                           long ic) {
  if ((long)get_global_id(0) >= inner) return;
  STORE(c, OFF3(c_off, sc, ic, mc),
        cond[OFF3(k_off, sk, ik, mk)] ? LOAD(a, OFF3(a_off, sa, ia, ma)) : LOAD(b, OFF3(b_off, sb, ib, mb)));
}

// ---------------------------------------------------------------- Cast
// Every pair of storage types in one kernel: the types are runtime codes (DT_*, the order of DType in
// runtime/tensor.hpp), so one build serves all casts. The source element is read once into a float
// (exact for every float type but f64), an integer and a nonzero flag; f64 takes part only where the
// device has cl_khr_fp64 (the host refuses f64 casts elsewhere). Rounding follows ONNX Cast: to nearest
// even for float targets (f64 sources round "to odd" to float first so nothing is rounded twice), float
// to integer truncates toward zero, integer targets wrap (4- and 2-bit ones keep their low bits, signed
// ones sign-extended as stored). The narrow float codecs mirror runtime/minifloat.cpp line for line.
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

// The DT_* codes and the narrow-float codecs live in common.cl (shared with kernels/quant.cl).

__kernel void cast_any(int from, int to, int saturate, int rounding, long n, __global const uchar* src, long s_off,
                       __global uchar* dst, long d_off) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long si = s_off + i, di = d_off + i;
  float f = 0.0f;  // the value rounded to nearest float
  float fo;        // the value rounded to odd float, for float targets narrower than f32
  long l = 0;      // the value truncated toward zero (integer sources: the value)
  int is_int = 0, nz;
#ifdef cl_khr_fp64
  double d = 0.0;
#endif
  switch (from) {
    case DT_F32: f = ((__global const float*)src)[si]; break;
    case DT_F16: f = vload_half(si, (__global const half*)src); break;
    case DT_BF16: f = as_float((uint)((__global const ushort*)src)[si] << 16); break;
    case DT_F8E8M0: {
      const uint c = src[si];
      f = c == 0xff ? NAN : as_float(c == 0 ? 0x400000u : c << 23);  // 2^(c - 127); 0 is the f32 subnormal 2^-127
      break;
    }
    case DT_F8E4M3FN: case DT_F8E4M3FNUZ: case DT_F8E5M2: case DT_F8E5M2FNUZ: case DT_F4E2M1:
      f = cast_decode_minifloat(src[si], cast_format(from));
      break;
#ifdef cl_khr_fp64
    case DT_F64: d = ((__global const double*)src)[si]; break;
#endif
    case DT_I32: l = ((__global const int*)src)[si]; is_int = 1; break;
    case DT_I64: case DT_U64: l = ((__global const long*)src)[si]; is_int = 1; break;
    case DT_U32: l = ((__global const uint*)src)[si]; is_int = 1; break;
    case DT_I16: l = ((__global const short*)src)[si]; is_int = 1; break;
    case DT_U16: l = ((__global const ushort*)src)[si]; is_int = 1; break;
    case DT_I8: case DT_I4: case DT_I2: l = ((__global const char*)src)[si]; is_int = 1; break;
    default: l = src[si]; is_int = 1; break;  // u8, bool, u4, u2
  }
  if (is_int) {
    f = from == DT_U64 ? convert_float((ulong)l) : convert_float(l);
    fo = f;  // integers that fit a narrow float target are exact in f32
    nz = l != 0;
#ifdef cl_khr_fp64
  } else if (from == DT_F64) {
    f = (float)d;
    fo = convert_float_rtz(d);
    if (!isnan(d) && (double)fo != d) fo = as_float(as_uint(fo) | 1u);
    l = (long)d;
    nz = d != 0.0;
#endif
  } else {
    fo = f;
    l = (long)f;
    nz = f != 0.0f;  // NaN is nonzero
  }
  switch (to) {
    case DT_F32: ((__global float*)dst)[di] = f; break;
    case DT_F16: vstore_half_rte(fo, di, (__global half*)dst); break;
    case DT_BF16: ((__global ushort*)dst)[di] = cast_encode_bf16(fo); break;
    case DT_F8E8M0: dst[di] = cast_encode_e8m0(fo, saturate, rounding); break;
    case DT_F8E4M3FN: case DT_F8E4M3FNUZ: case DT_F8E5M2: case DT_F8E5M2FNUZ: case DT_F4E2M1:
      dst[di] = cast_encode_minifloat(fo, cast_format(to), saturate);
      break;
#ifdef cl_khr_fp64
    case DT_F64:
      ((__global double*)dst)[di] = from == DT_F64 ? d : !is_int ? (double)f : from == DT_U64 ? convert_double((ulong)l) : convert_double(l);
      break;
#endif
    case DT_BOOL: dst[di] = nz ? 1 : 0; break;
    case DT_I32: case DT_U32: ((__global int*)dst)[di] = (int)l; break;
    case DT_I64: case DT_U64: ((__global long*)dst)[di] = l; break;
    case DT_I16: case DT_U16: ((__global short*)dst)[di] = (short)l; break;
    case DT_I4: ((__global char*)dst)[di] = (char)((long)((ulong)l << 60) >> 60); break;
    case DT_U4: dst[di] = (uchar)(l & 15); break;
    case DT_I2: ((__global char*)dst)[di] = (char)((long)((ulong)l << 62) >> 62); break;
    case DT_U2: dst[di] = (uchar)(l & 3); break;
    default: dst[di] = (uchar)l; break;  // u8, i8
  }
}
