// Reductions over any set of axes (ReduceSum/Mean/Max/Min/Prod/SumSquare/L1/L2/LogSum/LogSumExp) and
// ArgMax / ArgMin along one axis. The op is a runtime argument, so one build serves them all.
// The host collapses kept dims and reduced dims separately; one work-item per output element walks its
// reduced elements with the innermost reduced dim in the inner loop (no div/mod there).

#define R_SUM 0
#define R_MEAN 1
#define R_MAX 2
#define R_MIN 3
#define R_PROD 4
#define R_SUM_SQUARE 5
#define R_L2 6
#define R_L1 7
#define R_LOG_SUM 8
#define R_LOG_SUM_EXP 9


// One body per element type (float; double where the device has cl_khr_fp64): the accumulator has the
// element's type, so f32 accumulates in f32 and f64 in f64.
#define DEFINE_REDUCE(T, SUFFIX)                                                                               \
  inline T r_init##SUFFIX(int op) {                                                                            \
    return op == R_MAX ? (T)(-INFINITY) : op == R_MIN ? (T)INFINITY : op == R_PROD ? (T)1 : (T)0;             \
  }                                                                                                            \
  inline T r_step##SUFFIX(int op, T acc, T v, T shift) {                                                       \
    switch (op) {                                                                                              \
      case R_MAX: return fmax(acc, v);                                                                         \
      case R_MIN: return fmin(acc, v);                                                                         \
      case R_PROD: return acc * v;                                                                             \
      case R_SUM_SQUARE: case R_L2: return fma(v, v, acc);                                                     \
      case R_L1: return acc + fabs(v);                                                                         \
      case R_LOG_SUM_EXP: return acc + exp(v - shift);                                                         \
      default: return acc + v;                                                                                 \
    }                                                                                                          \
  }                                                                                                            \
  /* keep_*: kept dims (input strides) in output order; red_*: reduced dims (input strides), innermost      \
     reduced dim's length and stride given separately (r_len, r_step_). count = number of reduced elements. */ \
  __kernel void reduce_axes##SUFFIX(int op, int keep_rank, long8 keep_dims, long8 keep_strides, int red_rank,  \
                                    long8 red_dims, long8 red_strides, long r_len, long r_stride, long count,  \
                                    __global const T* x, long x_off, __global T* y, long y_off) {              \
    const long o = get_global_id(0);                                                                           \
    const long base = x_off + nd_offset(o, keep_rank, keep_dims, keep_strides);                                \
    const long outer = r_len ? count / r_len : 0; /* an empty reduced axis: no elements */                     \
    T shift = 0;                                                                                               \
    if (op == R_LOG_SUM_EXP) { /* max first, for a stable log-sum-exp */                                       \
      shift = (T)(-INFINITY);                                                                                  \
      for (long ro = 0; ro < outer; ++ro) {                                                                    \
        const long b = base + nd_offset(ro, red_rank, red_dims, red_strides);                                  \
        for (long k = 0; k < r_len; ++k) shift = fmax(shift, x[b + k * r_stride]);                            \
      }                                                                                                        \
      if (isinf(shift)) shift = 0;                                                                             \
    }                                                                                                          \
    T acc = r_init##SUFFIX(op);                                                                                \
    for (long ro = 0; ro < outer; ++ro) {                                                                      \
      const long b = base + nd_offset(ro, red_rank, red_dims, red_strides);                                    \
      for (long k = 0; k < r_len; ++k) acc = r_step##SUFFIX(op, acc, x[b + k * r_stride], shift);              \
    }                                                                                                          \
    switch (op) {                                                                                              \
      case R_MEAN: acc /= (T)count; break;                                                                     \
      case R_L2: acc = sqrt(acc); break;                                                                       \
      case R_LOG_SUM: acc = log(acc); break;                                                                   \
      case R_LOG_SUM_EXP: acc = log(acc) + shift; break;                                                       \
      default: break;                                                                                          \
    }                                                                                                          \
    y[y_off + o] = acc;                                                                                        \
  }
DEFINE_REDUCE(float, )

// Integer reductions (i32, i64): Sum, Mean (truncating toward zero), Max, Min, Prod, SumSquare and L1,
// exact; +, * wrap as numpy's do (computed unsigned, where overflow is defined). An empty Max / Min
// gives the type's lowest / highest value.
#define DEFINE_REDUCE_INT(T, UT, SUFFIX, TMIN, TMAX)                                                            \
  __kernel void reduce_axes##SUFFIX(int op, int keep_rank, long8 keep_dims, long8 keep_strides, int red_rank,  \
                                    long8 red_dims, long8 red_strides, long r_len, long r_stride, long count,  \
                                    __global const T* x, long x_off, __global T* y, long y_off) {              \
    const long o = get_global_id(0);                                                                           \
    const long base = x_off + nd_offset(o, keep_rank, keep_dims, keep_strides);                                \
    const long outer = r_len ? count / r_len : 0;                                                              \
    T acc = op == R_MAX ? TMIN : op == R_MIN ? TMAX : op == R_PROD ? (T)1 : (T)0;                              \
    for (long ro = 0; ro < outer; ++ro) {                                                                      \
      const long b = base + nd_offset(ro, red_rank, red_dims, red_strides);                                    \
      for (long k = 0; k < r_len; ++k) {                                                                       \
        const T v = x[b + k * r_stride];                                                                       \
        switch (op) {                                                                                          \
          case R_MAX: acc = max(acc, v); break;                                                                \
          case R_MIN: acc = min(acc, v); break;                                                                \
          case R_PROD: acc = (T)((UT)acc * (UT)v); break;                                                      \
          case R_SUM_SQUARE: acc = (T)((UT)acc + (UT)v * (UT)v); break;                                        \
          case R_L1: acc = (T)((UT)acc + (v < 0 ? (UT)0 - (UT)v : (UT)v)); break;                                         \
          default: acc = (T)((UT)acc + (UT)v); break;                                                          \
        }                                                                                                      \
      }                                                                                                        \
    }                                                                                                          \
    if (op == R_MEAN && count > 0) acc = (T)(acc / (T)count);                                                  \
    y[y_off + o] = acc;                                                                                        \
  }
DEFINE_REDUCE_INT(int, uint, _i32, INT_MIN, INT_MAX)
DEFINE_REDUCE_INT(long, ulong, _i64, LONG_MIN, LONG_MAX)

#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
DEFINE_REDUCE(double, _f64)
#endif

// ReduceMax / ReduceMin on bool / u8, exact; layout arguments as reduce_axes; init: the identity of an
// empty reduction (0 for max; 1 for bool min, 255 for u8 min).
__kernel void reduce_axes_u8(int is_max, uchar init, int keep_rank, long8 keep_dims, long8 keep_strides, int red_rank,
                             long8 red_dims, long8 red_strides, long r_len, long r_stride, long count,
                             __global const uchar* x, long x_off, __global uchar* y, long y_off) {
  const long o = get_global_id(0);
  const long base = x_off + nd_offset(o, keep_rank, keep_dims, keep_strides);
  const long outer = r_len ? count / r_len : 0;
  uchar acc = init;
  for (long ro = 0; ro < outer; ++ro) {
    const long b = base + nd_offset(ro, red_rank, red_dims, red_strides);
    for (long k = 0; k < r_len; ++k) acc = is_max ? max(acc, x[b + k * r_stride]) : min(acc, x[b + k * r_stride]);
  }
  y[y_off + o] = acc;
}

// ArgMax / ArgMin over (outer, len, inner); range (inner, outer). Ties: first index, or the last with
// select_last. NaN is not special-cased.
__kernel void arg_reduce(int is_min, int select_last, long len, __global const float* x, long x_off,
                         __global long* y, long y_off) {
  const long in = get_global_id(0), o = get_global_id(1), inner = get_global_size(0);
  x += x_off + o * len * inner + in;
  float best = x[0];
  long bi = 0;
  for (long k = 1; k < len; ++k) {
    const float v = x[k * inner];
    const int better = is_min ? (select_last ? v <= best : v < best) : (select_last ? v >= best : v > best);
    if (better) {
      best = v;
      bi = k;
    }
  }
  y[y_off + o * inner + in] = bi;
}

// CumSum / CumProd along an axis (ONNX): one work-item per (inner, outer) line scans its `len` elements
// in order (from the end with reverse); exclusive stores the running value before taking the element in
// (the identity, 0 or 1, first). f32 accumulates in f32, like ONNX's reference; integers wrap. f64 only
// where the device has cl_khr_fp64 (the host checks before asking for cumsum_f64 / cumprod_f64).
#define DEFINE_CUMSCAN(T, NAME, INIT, OP)                                                              \
  __kernel void NAME(long len, int exclusive, int reverse, __global const T* x, long x_off,            \
                     __global T* y, long y_off) {                                                      \
    const long i = get_global_id(0), o = get_global_id(1), inner = get_global_size(0);                \
    const long base = o * len * inner + i;                                                             \
    T acc = INIT;                                                                                      \
    for (long t = 0; t < len; ++t) {                                                                   \
      const long p = base + (reverse ? len - 1 - t : t) * inner;                                       \
      const T v = x[x_off + p];                                                                        \
      if (exclusive) y[y_off + p] = acc;                                                               \
      acc = acc OP v;                                                                                  \
      if (!exclusive) y[y_off + p] = acc;                                                              \
    }                                                                                                  \
  }
#define DEFINE_CUMSUM(T, NAME) DEFINE_CUMSCAN(T, NAME, 0, +)
#define DEFINE_CUMPROD(T, NAME) DEFINE_CUMSCAN(T, NAME, 1, *)
DEFINE_CUMSUM(float, cumsum_f32)
DEFINE_CUMSUM(int, cumsum_i32)
DEFINE_CUMSUM(long, cumsum_i64)
DEFINE_CUMSUM(uint, cumsum_u32)
DEFINE_CUMSUM(ulong, cumsum_u64)
// Integer products wrap in the unsigned type of the same width (signed overflow is undefined in C).
DEFINE_CUMPROD(float, cumprod_f32)
DEFINE_CUMPROD(uint, cumprod_u32)
DEFINE_CUMPROD(ulong, cumprod_u64)
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
DEFINE_CUMSUM(double, cumsum_f64)
DEFINE_CUMPROD(double, cumprod_f64)
#endif
