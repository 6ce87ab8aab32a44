// Softmax / LogSoftmax over one axis of a tensor viewed as (outer, len, inner); numerically stable
// (max subtracted before exp). is_log is a runtime argument so both ops share one build.

// inner == 1 (the last axis, the common case), two kernels (the layer picks and logs one):
// - softmax_rows: one work-group per row, local-memory reductions; for long rows and for GPUs.
// - softmax_rows_serial: each work-item walks `rows_per_item` whole rows with float8 loads and no barriers;
//   for CPUs, where a work-group's barriers cost more than the short row's arithmetic.
__kernel void softmax_rows(int is_log, long len, __global const float* x, long x_off, __global float* y,
                           long y_off, __local float* scratch) {
  const long row = get_group_id(0);
  const int lid = get_local_id(0), ls = get_local_size(0);
  x += x_off + row * len;
  y += y_off + row * len;
  float m = -INFINITY;
  for (long i = lid; i < len; i += ls) m = fmax(m, x[i]);
  scratch[lid] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int k = ls / 2; k > 0; k >>= 1) {
    if (lid < k) scratch[lid] = fmax(scratch[lid], scratch[lid + k]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  m = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  float s = 0.0f;
  for (long i = lid; i < len; i += ls) s += exp(x[i] - m);
  scratch[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int k = ls / 2; k > 0; k >>= 1) {
    if (lid < k) scratch[lid] += scratch[lid + k];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  s = scratch[0];
  if (is_log) {
    const float ls_ = log(s);
    for (long i = lid; i < len; i += ls) y[i] = x[i] - m - ls_;
  } else {
    const float inv = 1.0f / s;
    for (long i = lid; i < len; i += ls) y[i] = exp(x[i] - m) * inv;
  }
}

// Row max and sum of exp(x - max) without barriers: float8 accumulators, then the tail.
#define SOFTMAX_VEC 8
// Element k of 8 consecutive rows of length len from p (lane j: row j), and its store.
#define SOFTMAX_GATHER8(p, k, len)                                                                   \
  (float8)((p)[k], (p)[(len) + (k)], (p)[2 * (len) + (k)], (p)[3 * (len) + (k)], (p)[4 * (len) + (k)], \
           (p)[5 * (len) + (k)], (p)[6 * (len) + (k)], (p)[7 * (len) + (k)])
#define SOFTMAX_SCATTER8(v, p, k, len) \
  do {                                 \
    (p)[k] = (v).s0;                   \
    (p)[(len) + (k)] = (v).s1;         \
    (p)[2 * (len) + (k)] = (v).s2;     \
    (p)[3 * (len) + (k)] = (v).s3;     \
    (p)[4 * (len) + (k)] = (v).s4;     \
    (p)[5 * (len) + (k)] = (v).s5;     \
    (p)[6 * (len) + (k)] = (v).s6;     \
    (p)[7 * (len) + (k)] = (v).s7;     \
  } while (0)
__kernel void softmax_rows_serial(int is_log, long len, long rows, long rows_per_item, __global const float* x,
                                  long x_off, __global float* y, long y_off) {
  const long first = (long)get_global_id(0) * rows_per_item;
  const long last = min(first + rows_per_item, rows);
  const long body = len - len % SOFTMAX_VEC;
  long row = first;
  if (len < SOFTMAX_VEC) {
    // Rows shorter than a vector: 8 rows at a time, lane j holding row j, so exp runs on float8.
    for (; row + 8 <= last; row += 8) {
      __global const float* xr = x + x_off + row * len;
      __global float* yr = y + y_off + row * len;
      float8 m = (float8)(-INFINITY);
      for (long k = 0; k < len; ++k) m = fmax(m, SOFTMAX_GATHER8(xr, k, len));
      float8 s = (float8)(0.0f);
      for (long k = 0; k < len; ++k) s += exp(SOFTMAX_GATHER8(xr, k, len) - m);
      const float8 ls = log(s), inv = 1.0f / s;
      for (long k = 0; k < len; ++k) {
        const float8 v = SOFTMAX_GATHER8(xr, k, len);
        const float8 o = is_log ? (v - m) - ls : exp(v - m) * inv;
        SOFTMAX_SCATTER8(o, yr, k, len);
      }
    }
  }
  for (; row < last; ++row) {
    __global const float* xr = x + x_off + row * len;
    __global float* yr = y + y_off + row * len;
    float8 m8 = (float8)(-INFINITY);
    for (long i = 0; i < body; i += SOFTMAX_VEC) m8 = fmax(m8, vload8(0, xr + i));
    float m = fmax(fmax(fmax(m8.s0, m8.s1), fmax(m8.s2, m8.s3)), fmax(fmax(m8.s4, m8.s5), fmax(m8.s6, m8.s7)));
    for (long i = body; i < len; ++i) m = fmax(m, xr[i]);
    // Softmax stores exp(x - m) on this pass and scales it on the next, so exp runs once per element.
    float8 s8 = (float8)(0.0f);
    for (long i = 0; i < body; i += SOFTMAX_VEC) {
      const float8 e = exp(vload8(0, xr + i) - m);
      s8 += e;
      if (!is_log) vstore8(e, 0, yr + i);
    }
    float s = ((s8.s0 + s8.s1) + (s8.s2 + s8.s3)) + ((s8.s4 + s8.s5) + (s8.s6 + s8.s7));
    for (long i = body; i < len; ++i) {
      const float e = exp(xr[i] - m);
      s += e;
      if (!is_log) yr[i] = e;
    }
    if (is_log) {
      // (x - m) - log(s), not x - (m + log(s)): m + log(s) rounds at m's magnitude (10003.44 loses 0.0002).
      const float ls = log(s);
      for (long i = 0; i < body; i += SOFTMAX_VEC) vstore8((vload8(0, xr + i) - m) - ls, 0, yr + i);
      for (long i = body; i < len; ++i) yr[i] = (xr[i] - m) - ls;
    } else {
      const float inv = 1.0f / s;
      for (long i = 0; i < body; i += SOFTMAX_VEC) vstore8(vload8(0, yr + i) * inv, 0, yr + i);
      for (long i = body; i < len; ++i) yr[i] *= inv;
    }
  }
}

// inner > 1: one work-item per (outer, inner) column; neighbours read neighbouring addresses.
__kernel void softmax_strided(int is_log, long len, long inner, __global const float* x, long x_off,
                              __global float* y, long y_off) {
  const long in = get_global_id(0), o = get_global_id(1);
  x += x_off + o * len * inner + in;
  y += y_off + o * len * inner + in;
  float m = -INFINITY;
  for (long k = 0; k < len; ++k) m = fmax(m, x[k * inner]);
  float s = 0.0f;
  for (long k = 0; k < len; ++k) s += exp(x[k * inner] - m);
  if (is_log) {
    const float ls_ = log(s);
    for (long k = 0; k < len; ++k) y[k * inner] = x[k * inner] - m - ls_;
  } else {
    const float inv = 1.0f / s;
    for (long k = 0; k < len; ++k) y[k * inner] = exp(x[k * inner] - m) * inv;
  }
}
