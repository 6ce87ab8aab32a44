// Index ops: ScatterElements, ScatterND, GatherND, OneHot, Hardmax, Einsum, MaxUnpool, Trilu, NonZero. One build per element type, specialised by macros (set by layers/index.cpp):
//   T        storage type: float, double, char ... ulong; ushort for f16 and bf16; for types without
//            arithmetic (bool, the float8s ...) the unsigned integer of their size (moved, never computed)
//   T_CALC   arithmetic type (float for f16 / bf16, else T)
//   STORAGE  0 plain, 1 f16 (vload_half / vstore_half_rte: core OpenCL, no cl_khr_fp16), 2 bf16
//   IDX      element type of the index input (int or long; OneHot: any numeric type of its indices)
//   USE_FP64 1 in the double build (the host checks the device's cl_khr_fp64 first)
// Scatter with reduction stays deterministic without atomics: each work-item owns a disjoint set of
// output elements and applies the updates that reach them in index order (see each kernel). Reduction
// none may instead run one work-item per update (the *_winner kernels): atomic_max of update positions
// picks the last one per target, the same result in any execution order.
// Out-of-range indices (an error in ONNX, which a kernel cannot raise) are skipped by scatters and
// read as zeros by gathers, never touching memory outside the tensors.

#if USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif
#ifndef T_CALC
#define T_CALC T
#endif
#ifndef STORAGE
#define STORAGE 0
#endif
#ifndef IDX
#define IDX long
#endif

#if STORAGE == 1
#define LOAD(p, i) vload_half((i), (__global const half*)(p))
#define STORE(p, i, v) vstore_half_rte((v), (i), (__global half*)(p))
#elif STORAGE == 2
// bf16: the high half of an f32; stores round to nearest even (cast_encode_bf16 of common.cl).
#define LOAD(p, i) as_float((uint)(p)[i] << 16)
#define STORE(p, i, v) ((p)[i] = cast_encode_bf16(v))
#else
#define LOAD(p, i) ((T_CALC)(p)[i])
#define STORE(p, i, v) ((p)[i] = (T)(v))
#endif

// The components of a long8 / long16 argument, to initialise a private array (indexable in a loop).
#define L8(v) v.s0, v.s1, v.s2, v.s3, v.s4, v.s5, v.s6, v.s7
#define L16(v) L8(v.lo), L8(v.hi)

// Scatter reductions: 0 none (replace), 1 add, 2 mul, 3 max, 4 min.
inline T_CALC scatter_combine(int red, T_CALC a, T_CALC b) {
  switch (red) {
    case 1:
      return a + b;
    case 2:
      return a * b;
    case 3:
      return b > a ? b : a;
    case 4:
      return b < a ? b : a;
    default:
      return b;
  }
}

// dst[i] = src[i]: the data input copied into the output before a scatter.
__kernel void index_copy(__global const T* src, long s_off, __global T* dst, long d_off) {
  const long i = get_global_id(0);
  dst[d_off + i] = src[s_off + i];
}

// ScatterElements: one work-item per line of the updates along `axis` (a fixed set of the other
// coordinates). Updates of one line can only reach output elements with those same coordinates, so lines
// never share an output element; the line applies its updates in order, so duplicate indices reduce
// in index order (reduction none: the last one wins), as the ONNX reference does.
__kernel void scatter_elements(int rank, int axis, long8 udims, long8 ostrides, long axis_len, int red,
                               __global const IDX* idx, long i_off, __global const T* upd, long u_off, __global T* out,
                               long o_off) {
  const long l = get_global_id(0);
  const long ud[8] = {L8(udims)}, os[8] = {L8(ostrides)};
  const long len = ud[axis];
  long inner = 1;
  for (int d = axis + 1; d < rank; ++d) inner *= ud[d];
  long rem = l, obase = 0;
  for (int d = rank - 1; d >= 0; --d) {
    if (d == axis) continue;
    obase += (rem % ud[d]) * os[d];
    rem /= ud[d];
  }
  const long ubase = (l / inner) * len * inner + l % inner;
  for (long j = 0; j < len; ++j) {
    const long u = ubase + j * inner;
    long k = (long)idx[i_off + u];
    if (k < 0) k += axis_len;
    if (k < 0 || k >= axis_len) continue;
    const long p = o_off + obase + k * os[axis];
    T_CALC v = LOAD(upd, u_off + u);
    if (red) v = scatter_combine(red, LOAD(out, p), v);
    STORE(out, p, v);
  }
}

// ScatterElements' target of update u (its coordinates, `axis` replaced by the index); -1 when the
// index is out of range.
inline long scatter_elements_target(long u, int rank, int axis, const long* ud, const long* os, long axis_len,
                                    __global const IDX* idx) {
  long k = (long)idx[u];
  if (k < 0) k += axis_len;
  if (k < 0 || k >= axis_len) return -1;
  long rem = u, off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const long c = rem % ud[d];
    rem /= ud[d];
    off += (d == axis ? k : c) * os[d];
  }
  return off;
}

// Reduction none where the walks above would leave most of the device idle (few lines / slice
// elements): one work-item per update, in two passes over a winner workspace (-1 filled): pass 0 claims
// the target with atomic_max of the update's position, pass 1 writes the updates that won. Repeated
// indices still end with the last update, as in the serial walk, with no ordering between work-items.
__kernel void scatter_elements_winner(int pass, int rank, int axis, long8 udims, long8 ostrides, long axis_len,
                                      __global const IDX* idx, long i_off, __global const T* upd, long u_off,
                                      __global T* out, long o_off, __global int* winner, long w_off) {
  const int u = (int)get_global_id(0);
  const long ud[8] = {L8(udims)}, os[8] = {L8(ostrides)};
  const long p = scatter_elements_target(u, rank, axis, ud, os, axis_len, idx + i_off);
  if (p < 0) return;
  if (pass == 0)
    atomic_max(winner + w_off + p, u);
  else if (winner[w_off + p] == u)
    out[o_off + p] = upd[u_off + u];
}

// Offset of index tuple i (k entries) into data whose first k dims / strides are dd / ds; -1 when an
// entry is out of range. Negative entries count from the end.
inline long nd_tuple_offset(__global const IDX* idx, long i, int k, const long* dd, const long* ds) {
  long off = 0;
  for (int j = 0; j < k; ++j) {
    long v = (long)idx[i * k + j];
    if (v < 0) v += dd[j];
    if (v < 0 || v >= dd[j]) return -1;
    off += v * ds[j];
  }
  return off;
}

// ScatterND: one work-item per element e of the updated slices (prod of data dims k..); it walks the n
// index tuples in order, so duplicates reduce in index order. Work-items never share an output element.
__kernel void scatter_nd(int k, long n, long slice, long8 ddims, long8 dstrides, int red, __global const IDX* idx,
                         long i_off, __global const T* upd, long u_off, __global T* out, long o_off) {
  const long e = get_global_id(0);
  const long dd[8] = {L8(ddims)}, ds[8] = {L8(dstrides)};
  idx += i_off;
  for (long i = 0; i < n; ++i) {
    const long off = nd_tuple_offset(idx, i, k, dd, ds);
    if (off < 0) continue;
    const long p = o_off + off + e;
    T_CALC v = LOAD(upd, u_off + i * slice + e);
    if (red) v = scatter_combine(red, LOAD(out, p), v);
    STORE(out, p, v);
  }
}

// ScatterND, reduction none, as scatter_elements_winner: range (slice element e, tuple i), update u =
// i * slice + e.
__kernel void scatter_nd_winner(int pass, int k, long8 ddims, long8 dstrides, __global const IDX* idx, long i_off,
                                __global const T* upd, long u_off, __global T* out, long o_off, __global int* winner,
                                long w_off) {
  const long e = get_global_id(0), i = get_global_id(1), slice = get_global_size(0);
  const long dd[8] = {L8(ddims)}, ds[8] = {L8(dstrides)};
  const long off = nd_tuple_offset(idx + i_off, i, k, dd, ds);
  if (off < 0) return;
  const int u = (int)(i * slice + e);
  if (pass == 0)
    atomic_max(winner + w_off + off + e, u);
  else if (winner[w_off + off + e] == u)
    out[o_off + off + e] = upd[u_off + u];
}

// GatherND: one work-item per output element (e, q) = (element of the slice, index tuple). With
// batch_dims b the tuple q belongs to batch q / batch_inner and indexes data dims b .. b+k-1 of it.
__kernel void gather_nd(int k, long batch_inner, long batch_stride, long8 ddims, long8 dstrides,
                        __global const IDX* idx, long i_off, __global const T* src, long s_off, __global T* dst,
                        long d_off) {
  const long e = get_global_id(0), q = get_global_id(1), slice = get_global_size(0);
  const long dd[8] = {L8(ddims)}, ds[8] = {L8(dstrides)};
  const long off = nd_tuple_offset(idx + i_off, q, k, dd, ds);
  dst[d_off + q * slice + e] = off < 0 ? (T)0 : src[s_off + (q / batch_inner) * batch_stride + off + e];
}

// OneHot: range (inner, depth, outer) over the output; out = values[1] where the index (negative
// counts from the end where `wrap`, opset 11+) equals the depth coordinate, else values[0]. Indices
// outside [-depth, depth) (outside [0, depth) without `wrap`: opsets 9-10) give all off.
__kernel void one_hot(__global const IDX* idx, long i_off, __global const T* values, long v_off, __global T* dst,
                      long d_off, int wrap) {
  const long in = get_global_id(0), d = get_global_id(1), outer = get_global_id(2);
  const long inner = get_global_size(0), depth = get_global_size(1);
  long k = (long)idx[i_off + outer * inner + in];
  if (k < 0 && wrap) k += depth;
  dst[d_off + (outer * depth + d) * inner + in] = values[v_off + (k == d ? 1 : 0)];
}

// Hardmax along an axis: one work-item per line (inner, outer) writes 1 at the first maximum, 0 elsewhere.
__kernel void hardmax(long len, __global const T* x, long x_off, __global T* y, long y_off) {
  const long i = get_global_id(0), o = get_global_id(1), inner = get_global_size(0);
  const long base = o * len * inner + i;
  long best = 0;
  T_CALC bv = LOAD(x, x_off + base);
  for (long a = 1; a < len; ++a) {
    const T_CALC v = LOAD(x, x_off + base + a * inner);
    if (v > bv) bv = v, best = a;
  }
  for (long a = 0; a < len; ++a) STORE(y, y_off + base + a * inner, (T_CALC)(a == best ? 1 : 0));
}

// Trilu: keeps the upper (j - i >= k) or lower (j - i <= k) triangle of every trailing [N, M] matrix
// and writes zeros elsewhere; elements are moved as stored (zero bits are 0 in every storage type).
__kernel void trilu(long k, int upper, __global const T* x, long x_off, __global T* y, long y_off) {
  const long j = get_global_id(0), i = get_global_id(1), b = get_global_id(2);
  const long at = (b * get_global_size(1) + i) * get_global_size(0) + j;
  const long d = j - i;
  y[y_off + at] = (upper ? d >= k : d <= k) ? x[x_off + at] : (T)0;
}

// Einsum, direct: one work-item per output element sums, over every value of the contracted labels,
// the product of the inputs. Labels 0 .. n_out-1 are the output's (in its order), n_out .. n_out+n_sum-1
// the contracted ones; sizes holds each label's extent and st<t> input t's stride for it (0 where the
// input lacks the label or broadcasts it; a label repeated in one input has its strides summed, which
// walks the diagonal). Up to 4 inputs, 16 labels.
__kernel void einsum(int n_in, int n_out, int n_sum, long sum_total, long16 sizes, long16 st0, long16 st1, long16 st2,
                     long16 st3, __global const T* x0, long o0, __global const T* x1, long o1, __global const T* x2,
                     long o2, __global const T* x3, long o3, __global T* y, long y_off) {
  const long o = get_global_id(0);
  const long sz[16] = {L16(sizes)};
  const long s[4][16] = {{L16(st0)}, {L16(st1)}, {L16(st2)}, {L16(st3)}};
  long b[4] = {o0, o1, o2, o3};
  long rem = o;
  for (int l = n_out - 1; l >= 0; --l) {
    const long c = rem % sz[l];
    rem /= sz[l];
    for (int t = 0; t < 4; ++t) b[t] += c * s[t][l];
  }
  T_CALC acc = 0;
  if (n_sum == 1 && n_in == 2) {  // one contracted label of two inputs (matmul, inner product): a tight loop
    const long n = sz[n_out], s0 = s[0][n_out], s1 = s[1][n_out];
    for (long j = 0; j < n; ++j) acc += LOAD(x0, b[0] + j * s0) * LOAD(x1, b[1] + j * s1);
    STORE(y, y_off + o, acc);
    return;
  }
  // Walk the contracted labels as an odometer (the last fastest), moving the input offsets along.
  long c[16] = {0};
  long a[4] = {b[0], b[1], b[2], b[3]};
  for (long r = 0; r < sum_total; ++r) {
    T_CALC p = LOAD(x0, a[0]);
    if (n_in > 1) p *= LOAD(x1, a[1]);
    if (n_in > 2) p *= LOAD(x2, a[2]);
    if (n_in > 3) p *= LOAD(x3, a[3]);
    acc += p;
    for (int l = n_out + n_sum - 1; l >= n_out; --l) {
      for (int t = 0; t < 4; ++t) a[t] += s[t][l];
      if (++c[l] < sz[l]) break;
      for (int t = 0; t < 4; ++t) a[t] -= sz[l] * s[t][l];
      c[l] = 0;
    }
  }
  STORE(y, y_off + o, acc);
}

// MaxUnpool in three passes, deterministic where indices repeat (the last input element wins, as in
// the ONNX reference): winner[p] = -1 (winner_init); each input element i claims output p with atomic_max(i);
// then every output takes its winner's value or 0. Indices are flat over the unpooled shape (idims,
// N and C included); an output shape larger than that places it in the leading corner (odims; rank 0
// when the output is the unpooled shape itself).
// winner[i] = -1 (the scatter and MaxUnpool winner workspaces).
__kernel void winner_init(__global int* winner, long w_off) { winner[w_off + get_global_id(0)] = -1; }

__kernel void unpool_claim(int rank, long total, long8 idims, long8 odims, __global const IDX* idx, long i_off,
                           __global int* winner, long w_off) {
  const int i = (int)get_global_id(0);
  long k = (long)idx[i_off + i];
  if (k < 0 || k >= total) return;
  if (rank == 0) {  // the output is the unpooled shape: indices address it directly
    atomic_max(winner + w_off + k, i);
    return;
  }
  const long id[8] = {L8(idims)}, od[8] = {L8(odims)};
  long p = 0, stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    p += (k % id[d]) * stride;
    k /= id[d];
    stride *= od[d];
  }
  atomic_max(winner + w_off + p, i);
}

__kernel void unpool_write(__global const int* winner, long w_off, __global const T* x, long x_off, __global T* y,
                           long y_off) {
  const long p = get_global_id(0);
  const int w = winner[w_off + p];
  y[y_off + p] = w < 0 ? (T)0 : x[x_off + w];
}

// NonZero in one work-group (up to NZ_LOCAL work-items): work-item w owns the contiguous segment
// [w * seg, (w + 1) * seg) of x. Pass 1 counts each segment's non-zeros (NaN counts); an exclusive prefix
// sum over the segments (one work-item, NZ_LOCAL values) gives each segment's first output position and
// the total; pass 2 writes each hit's coordinates to y[d * total + pos]: the [rank, total] result, in
// row-major order, at the start of y (whose bound is [rank, n]). count[0] gets the total.
#define NZ_LOCAL 256
__kernel void nonzero(long n, int rank, long8 dims, __global const T* x, long x_off, __global long* y, long y_off,
                      __global long* count, long count_off) {
  __local long part[NZ_LOCAL];
  __local long total;
  const long lid = get_local_id(0), ls = get_local_size(0);
  const long seg = (n + ls - 1) / ls, lo = min(n, lid * seg), hi = min(n, lo + seg);
  long mine = 0;
  for (long i = lo; i < hi; ++i) mine += LOAD(x, x_off + i) != (T_CALC)0;
  part[lid] = mine;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) {
    long run = 0;
    for (long k = 0; k < ls; ++k) {
      const long c = part[k];
      part[k] = run;
      run += c;
    }
    total = run;
    count[count_off] = run;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const long t = total;
  const long d[8] = {L8(dims)};
  long pos = part[lid];
  for (long i = lo; i < hi; ++i) {
    if (!(LOAD(x, x_off + i) != (T_CALC)0)) continue;
    long rem = i;
    for (int k = rank - 1; k >= 0; --k) {
      y[y_off + k * t + pos] = rem % d[k];
      rem /= d[k];
    }
    ++pos;
  }
}
