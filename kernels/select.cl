// Selection and reordering along an axis: TopK and ReverseSequence. One build per element type,
// specialised by macros (set by layers/select.cpp):
//   T         storage type: float, double, char ... ulong; ushort for f16 and bf16; ReverseSequence moves
//             any type as the unsigned integer of its size
//   T_CALC    comparison type (float for f16 / bf16, else T)
//   IS_FLOAT  1 for the float types (NaN ordering)
//   STORAGE   0 plain, 1 f16 (vload_half: core OpenCL, no cl_khr_fp16), 2 bf16
//   USE_FP64  1 in the double build (the host checks the device's cl_khr_fp64 first)

#if USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif
#ifndef T_CALC
#define T_CALC T
#endif
#ifndef IS_FLOAT
#define IS_FLOAT 1
#endif
#ifndef STORAGE
#define STORAGE 0
#endif

#if STORAGE == 1
#define LOAD(p, i) vload_half((i), (__global const half*)(p))
#elif STORAGE == 2
#define LOAD(p, i) as_float((uint)(p)[i] << 16)
#else
#define LOAD(p, i) ((T_CALC)(p)[i])
#endif

// The order TopK sorts by: NaN above every number (numpy's sort puts NaN last), NaNs equal to each other.
#if IS_FLOAT
#define GREATER(a, b) ((isnan(a) && !isnan(b)) || (a) > (b))
#define SAME(a, b) ((a) == (b) || (isnan(a) && isnan(b)))
#else
#define GREATER(a, b) ((a) > (b))
#define SAME(a, b) ((a) == (b))
#endif

// TopK: one work-item per element (inner i, position j in the line, outer o) counts the elements of its
// line that come before it in the output order: a better value (greater with `largest`, else smaller),
// or the same value at a lower index (ONNX breaks ties by the lower index). That count is the element's
// rank; ranks below k are written to that position of the values and indices outputs. Exact and
// deterministic with no sort, O(len) per element: meant for lines of up to a few thousand elements.
__kernel void topk(long len, long k, int largest, __global const T* x, long x_off, __global T* y, long y_off,
                   __global long* yi, long yi_off) {
  const long i = get_global_id(0), j = get_global_id(1), o = get_global_id(2), inner = get_global_size(0);
  const long base = o * len * inner + i;
  const T_CALC v = LOAD(x, x_off + base + j * inner);
  long r = 0;
  for (long t = 0; t < len && r < k; ++t) {
    const T_CALC u = LOAD(x, x_off + base + t * inner);
    const int better = largest ? GREATER(u, v) : GREATER(v, u);
    r += (better || (t < j && SAME(u, v))) ? 1 : 0;
  }
  if (r < k) {
    const long at = o * k * inner + r * inner + i;
    y[y_off + at] = x[x_off + base + j * inner];  // the stored bits, unrounded
    yi[yi_off + at] = j;
  }
}

// TopK, one work-item per line (inner i, outer o): insertion into the sorted k best so far, kept in the
// outputs themselves. Elements arrive in index order, so one equal to a kept value goes after it (ties
// to the lower index). O(len * k) per line: for long lines with a small k, where counting ranks
// (O(len) per element) would cost len times more.
__kernel void topk_line(long len, long k, int largest, __global const T* x, long x_off, __global T* y, long y_off,
                        __global long* yi, long yi_off) {
  const long i = get_global_id(0), o = get_global_id(1), inner = get_global_size(0);
  const long base = o * len * inner + i, obase = o * k * inner + i;
  if (k == 0) return;
  long n = 0;  // kept so far
  for (long t = 0; t < len; ++t) {
    const T_CALC v = LOAD(x, x_off + base + t * inner);
    if (n == k) {  // full: v must beat the last kept value
      const T_CALC w = LOAD(y, y_off + obase + (k - 1) * inner);
      if (!(largest ? GREATER(v, w) : GREATER(w, v))) continue;
    }
    long p = n < k ? n : k - 1;  // shift worse values down, from the end
    while (p > 0) {
      const T_CALC w = LOAD(y, y_off + obase + (p - 1) * inner);
      if (!(largest ? GREATER(v, w) : GREATER(w, v))) break;
      y[y_off + obase + p * inner] = y[y_off + obase + (p - 1) * inner];
      yi[yi_off + obase + p * inner] = yi[yi_off + obase + (p - 1) * inner];
      --p;
    }
    y[y_off + obase + p * inner] = x[x_off + base + t * inner];
    yi[yi_off + obase + p * inner] = t;
    if (n < k) ++n;
  }
}

// TopK, one work-item per line (inner i, outer o), for CPUs: a bottom-up merge sort of the line's indices
// by value in the workspace (two int arrays of len per line), then the first k written out. Merging takes
// the right run's element first only when it is strictly better, so the sort is stable and equal values
// keep the lower index first (ONNX's tie rule). O(len log len) per line, against the rank count's
// O(len^2) spread over len work-items: SSDlite's per-class top 300 of 3234 boxes took 3.2 ms ranked.
__kernel void topk_sort(long len, long k, int largest, __global const T* x, long x_off, __global T* y, long y_off,
                        __global long* yi, long yi_off, __global int* ws, long ws_off) {
  const long i = get_global_id(0), o = get_global_id(1), inner = get_global_size(0);
  const long base = x_off + o * len * inner + i, obase = o * k * inner + i;
  __global int* a = ws + ws_off + (o * inner + i) * 2 * len;
  __global int* b = a + len;
  for (long t = 0; t < len; ++t) a[t] = (int)t;
  for (long w = 1; w < len; w *= 2) {
    for (long lo = 0; lo < len; lo += 2 * w) {
      const long mid = min(lo + w, len), hi = min(lo + 2 * w, len);
      long p = lo, q = mid, r = lo;
      if (p < mid && q < hi) {
        T_CALC u = LOAD(x, base + (long)a[p] * inner), v = LOAD(x, base + (long)a[q] * inner);
        for (;;) {
          if (largest ? GREATER(v, u) : GREATER(u, v)) {
            b[r++] = a[q++];
            if (q == hi) break;
            v = LOAD(x, base + (long)a[q] * inner);
          } else {
            b[r++] = a[p++];
            if (p == mid) break;
            u = LOAD(x, base + (long)a[p] * inner);
          }
        }
      }
      while (p < mid) b[r++] = a[p++];
      while (q < hi) b[r++] = a[q++];
    }
    __global int* t = a;
    a = b;
    b = t;
  }
  for (long r = 0; r < k; ++r) {
    y[y_off + obase + r * inner] = x[base + (long)a[r] * inner];  // the stored bits, unrounded
    yi[yi_off + obase + r * inner] = a[r];
  }
}

// ReverseSequence: one work-item per element (inner i, batch entry b, time step t). The first lens[b]
// steps of entry b are reversed, the rest copied. ts / bs: the strides of the time and batch axes (the
// two leading axes in either order), inner: the product of the other dims. lens is clamped to
// [0, steps] so that a bad length never reads outside the tensor.
__kernel void reverse_sequence(long steps, long ts, long bs, __global const long* lens, long l_off,
                               __global const T* x, long x_off, __global T* y, long y_off) {
  const long i = get_global_id(0), b = get_global_id(1), t = get_global_id(2);
  const long n = clamp(lens[l_off + b], 0L, steps);
  const long src = t < n ? n - 1 - t : t;
  y[y_off + t * ts + b * bs + i] = x[x_off + src * ts + b * bs + i];
}
