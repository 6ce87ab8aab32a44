// Linear algebra on small matrices: Det. Macros (set by layers/linalg.cpp):
//   T         element and arithmetic type: float (f32 accumulation) or double (USE_FP64)
//   USE_FP64  1 in the double build (the host checks the device's cl_khr_fp64 first)

#if USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif

// Det: one work-item per n x n matrix: Gaussian elimination with partial pivoting (the largest magnitude
// in the column, the first one on ties) on a copy in the workspace w, the product of the pivots with one
// sign flip per row swap. A zero column gives 0. O(n^3) per work-item: meant for the small matrices
// models carry (rotations, covariances), not for large n.
__kernel void det(long n, __global const T* x, long x_off, __global T* w, long w_off, __global T* y, long y_off) {
  const long b = get_global_id(0), nn = n * n;
  __global const T* src = x + x_off + b * nn;
  __global T* a = w + w_off + b * nn;
  for (long i = 0; i < nn; ++i) a[i] = src[i];
  T r = 1;
  for (long c = 0; c < n; ++c) {
    long p = c;
    for (long i = c + 1; i < n; ++i)
      if (fabs(a[i * n + c]) > fabs(a[p * n + c])) p = i;
    const T piv = a[p * n + c];
    if (piv == 0) {
      r = 0;
      break;
    }
    if (p != c) {
      for (long j = c; j < n; ++j) {
        const T t = a[p * n + j];
        a[p * n + j] = a[c * n + j];
        a[c * n + j] = t;
      }
      r = -r;
    }
    r *= piv;
    for (long i = c + 1; i < n; ++i) {
      const T f = a[i * n + c] / piv;
      for (long j = c + 1; j < n; ++j) a[i * n + j] -= f * a[c * n + j];
    }
  }
  y[y_off + b] = r;
}
