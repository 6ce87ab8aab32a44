// Element-wise ops: unary (activations and math), binary with numpy broadcasting, Where, Cast.
// One kernel per arity; the op is a runtime argument (a uniform switch, cheap next to memory traffic)
// so one build per element type serves every op. Macros: T_IN (element type, default float), T_OUT
// (binary result type: T_IN, or uchar for comparisons), IS_FLOAT (1 when T_IN is float).
// Broadcasting: the host collapses the shape and passes per-operand strides as long8 (0 on broadcast
// dims); the range is 3-D: the innermost dim, the next one, and the product of the others.

#ifndef T_IN
#define T_IN float
#endif
#ifndef T_OUT
#define T_OUT T_IN
#endif
#ifndef IS_FLOAT
#define IS_FLOAT 1
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


inline T_IN unary_apply(int op, T_IN x, float a, float b) {
  switch (op) {
#if IS_FLOAT
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_RECIPROCAL: return 1.0f / x;
    case U_FLOOR: return floor(x);
    case U_CEIL: return ceil(x);
    case U_ROUND: return rint(x);  // ONNX Round: halves to even
    case U_ERF: return erf(x);
    case U_SIN: return sin(x);
    case U_COS: return cos(x);
    case U_ABS: return fabs(x);
    case U_SIGN: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f);
    case U_NEG: return -x;
    default: return cldl_act(op, x, a, b);
#else
    case U_ABS: return x < 0 ? (T_IN)(-x) : x;
    case U_SIGN: return (T_IN)(x > 0 ? 1 : (x < 0 ? -1 : 0));
    case U_NEG: return (T_IN)(-x);
    case U_NOT: return (T_IN)(x == 0);
    case ACT_RELU: return x > 0 ? x : (T_IN)0;
    default: return x;
#endif
  }
}

__kernel void unary(int op, float a, float b, long n, __global const T_IN* x, long x_off, __global T_IN* y,
                    long y_off) {
  const long i = get_global_id(0);
  if (i < n) y[y_off + i] = unary_apply(op, x[x_off + i], a, b);
}

inline T_OUT binary_apply(int op, T_IN a, T_IN b) {
  switch (op) {
    case B_ADD: return (T_OUT)(a + b);
    case B_SUB: return (T_OUT)(a - b);
    case B_MUL: return (T_OUT)(a * b);
#if IS_FLOAT
    case B_DIV: return (T_OUT)(a / b);
    case B_POW: return (T_OUT)pow(a, b);
    case B_MOD: {  // Python semantics: the result takes the divisor's sign
      T_IN r = fmod(a, b);
      return (T_OUT)((r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r);
    }
    case B_FMOD: return (T_OUT)fmod(a, b);
    case B_PRELU: return (T_OUT)(a < 0.0f ? a * b : a);
#else
    // Integer division by zero traps on CPUs; it is undefined in ONNX, so it yields 0 here.
    case B_DIV: return (T_OUT)(b == 0 ? 0 : a / b);
    case B_POW: return (T_OUT)pow((float)a, (float)b);
    case B_MOD: {
      if (b == 0) return (T_OUT)0;
      T_IN r = a % b;
      return (T_OUT)((r != 0 && ((r < 0) != (b < 0))) ? r + b : r);
    }
    case B_FMOD: return (T_OUT)(b == 0 ? 0 : a % b);
    case B_PRELU: return (T_OUT)(a < 0 ? a * b : a);
#endif
    case B_MAX: return (T_OUT)(a > b ? a : b);
    case B_MIN: return (T_OUT)(a < b ? a : b);
    case B_EQUAL: return (T_OUT)(a == b);
    case B_LESS: return (T_OUT)(a < b);
    case B_LESS_EQUAL: return (T_OUT)(a <= b);
    case B_GREATER: return (T_OUT)(a > b);
    case B_GREATER_EQUAL: return (T_OUT)(a >= b);
    case B_AND: return (T_OUT)((a != 0) && (b != 0));
    case B_OR: return (T_OUT)((a != 0) || (b != 0));
    case B_XOR: return (T_OUT)((a != 0) != (b != 0));
    default: return (T_OUT)0;
  }
}

// 3-D range (innermost dim, second-innermost dim, the rest flattened): the two inner coordinates come
// straight from the ids with scalar strides (ia / ma ...), so only dims beyond the third need div/mod.
#define OFF3(off, s, i_, m_) ((off) + nd_offset(get_global_id(2), rank - 2, dims, s) + \
                              (long)get_global_id(1) * (m_) + (long)get_global_id(0) * (i_))

__kernel void binary(int op, int rank, long8 dims, long inner, __global const T_IN* a, long a_off, long8 sa, long ma, long ia,
                     __global const T_IN* b, long b_off, long8 sb, long mb, long ib, __global T_OUT* c, long c_off,
                     long8 sc, long mc, long ic) {
  if ((long)get_global_id(0) >= inner) return;
  c[OFF3(c_off, sc, ic, mc)] = binary_apply(op, a[OFF3(a_off, sa, ia, ma)], b[OFF3(b_off, sb, ib, mb)]);
}

// Where(cond, x, y) with three-way broadcasting; cond is bool (uchar).
__kernel void where_select(int rank, long8 dims, long inner, __global const uchar* cond, long k_off, long8 sk, long mk, long ik,
                           __global const T_IN* a, long a_off, long8 sa, long ma, long ia, __global const T_IN* b,
                           long b_off, long8 sb, long mb, long ib, __global T_IN* c, long c_off, long8 sc, long mc,
                           long ic) {
  if ((long)get_global_id(0) >= inner) return;
  c[OFF3(c_off, sc, ic, mc)] = cond[OFF3(k_off, sk, ik, mk)] ? a[OFF3(a_off, sa, ia, ma)] : b[OFF3(b_off, sb, ib, mb)];
}

// Cast between f32 / i32 / i64 / u8 / bool with the types as runtime codes (0 f32, 1 i32, 2 i64, 3 u8,
// 4 bool), so every pair shares one build. Float to integer truncates toward zero; to bool is x != 0.
__kernel void cast_any(int from, int to, long n, __global const uchar* src, long s_off, __global uchar* dst,
                       long d_off) {
  const long i = get_global_id(0);
  if (i >= n) return;
  float f;
  long l;
  switch (from) {
    case 0: f = ((__global const float*)src)[s_off + i]; l = (long)f; break;
    case 1: l = ((__global const int*)src)[s_off + i]; f = (float)l; break;
    case 2: l = ((__global const long*)src)[s_off + i]; f = (float)l; break;
    default: l = src[s_off + i]; f = (float)l; break;
  }
  switch (to) {
    case 0: ((__global float*)dst)[d_off + i] = f; break;
    case 1: ((__global int*)dst)[d_off + i] = (int)l; break;
    case 2: ((__global long*)dst)[d_off + i] = l; break;
    case 3: dst[d_off + i] = (uchar)l; break;
    default: dst[d_off + i] = (from == 0 ? f != 0.0f : l != 0) ? 1 : 0; break;
  }
}
