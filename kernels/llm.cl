// Ops of current language models (ONNX 1.23): TensorScatter (KV-cache update), SwiGLU of two inputs,
// CausalConvWithState (depthwise causal conv with a carried state) and LinearAttention (linear, gated,
// delta and gated-delta recurrences with GQA head sharing).
//
// Macros (defaults correct on any device):
//   ELEM_BYTES  TensorScatter: bytes per element (1, 2, 4 or 8; the data is moved, not read as numbers)
//   T_HALF      1: activations (inputs and outputs other than the states) are stored as f16, else f32
//   S_HALF      1: LinearAttention's past / present state is stored as f16, else f32
//   SILU        CausalConvWithState: 1 applies x * sigmoid(x) to the conv output
//   DK          LinearAttention: the key head dim; > 0 keeps each work-item's state column in a private
//               array of DK floats, 0 keeps it in the f32 workspace (any d_k; the fallback past
//               LA_MAX_PRIVATE_DK in layers/llm.cpp)
// Every kernel accumulates in fp32; f16 is converted on load and rounded to nearest even on store
// (vload_half / vstore_half_rte: no cl_khr_fp16 needed).

#ifndef ELEM_BYTES
#define ELEM_BYTES 4
#endif
#ifndef T_HALF
#define T_HALF 0
#endif
#ifndef S_HALF
#define S_HALF 0
#endif
#ifndef SILU
#define SILU 0
#endif
#ifndef DK
#define DK 0
#endif

#if T_HALF
#define TSTORE __global half
#define LOAD_T(p, i) vload_half((i), (p))
#define STORE_T(p, i, v) vstore_half_rte((v), (i), (p))
#else
#define TSTORE __global float
#define LOAD_T(p, i) (p)[i]
#define STORE_T(p, i, v) ((p)[i] = (v))
#endif
#if S_HALF
#define SSTORE __global half
#define LOAD_S(p, i) vload_half((i), (p))
#define STORE_S(p, i, v) vstore_half_rte((v), (i), (p))
#else
#define SSTORE __global float
#define LOAD_S(p, i) (p)[i]
#define STORE_S(p, i, v) ((p)[i] = (v))
#endif

#if ELEM_BYTES == 1
typedef uchar elem_t;
#elif ELEM_BYTES == 2
typedef ushort elem_t;
#elif ELEM_BYTES == 8
typedef ulong elem_t;
#else
typedef uint elem_t;
#endif

// TensorScatter: the cache viewed as [outer, L, inner] (L = max_sequence_length, the axis), the update as
// [outer, S, inner]; outer rows per batch entry = outer / batch. Where past and present are the same bytes
// (updated in place), this kernel writes update row j of each cache row to position w + j (linear)
// or (w + j) mod L (circular), w the batch entry's write index. A linear write outside [0, L) (which the
// spec forbids; checked when the indices are known at load) is not made, so no memory past the cache is
// touched. Global (inner, S, outer).
__kernel void tensor_scatter(long L, long rows_per_batch, int circular, int has_indices, __global const elem_t* update,
                             long upd_off, __global const long* indices, long idx_off, __global elem_t* present,
                             long pres_off) {
  const long i = get_global_id(0), j = get_global_id(1), o = get_global_id(2);
  const long inner = get_global_size(0), S = get_global_size(1);
  long pos = (has_indices ? indices[idx_off + o / rows_per_batch] : 0) + j;
  if (circular) {
    pos %= L;
    if (pos < 0) pos += L;
  } else if (pos < 0 || pos >= L) {
    return;
  }
  present[pres_off + (o * L + pos) * inner + i] = update[upd_off + (o * S + j) * inner + i];
}

// TensorScatter in one command where past and present are different buffers: every element of present,
// from the update where its position p is written (linear: p - w in [0, S); circular: (p - w) mod L < S),
// else from past. Each work-item reads and writes only its own element, so past may also be present.
// Global (inner, L, outer).
__kernel void tensor_scatter_whole(long S, long rows_per_batch, int circular, int has_indices,
                                   __global const elem_t* past, long past_off, __global const elem_t* update,
                                   long upd_off, __global const long* indices, long idx_off,
                                   __global elem_t* present, long pres_off) {
  const long i = get_global_id(0), p = get_global_id(1), o = get_global_id(2);
  const long inner = get_global_size(0), L = get_global_size(1);
  long j = p - (has_indices ? indices[idx_off + o / rows_per_batch] : 0);
  if (circular) {
    j %= L;
    if (j < 0) j += L;
  }
  const long e = (o * L + p) * inner + i;
  present[pres_off + e] = (j >= 0 && j < S) ? update[upd_off + (o * S + j) * inner + i] : past[past_off + e];
}

// SwiGLU of two inputs: y = a * sigmoid(alpha * a) * b, element for element. Global (n).
__kernel void swiglu_pair(float alpha, TSTORE* A, long a_off, TSTORE* B, long b_off, TSTORE* Y, long y_off) {
  const long i = get_global_id(0);
  const float a = LOAD_T(A + a_off, i), b = LOAD_T(B + b_off, i);
  STORE_T(Y + y_off, i, a / (1.0f + exp(-alpha * a)) * b);
}

// CausalConvWithState: x [B, C, Lx], weight [C, 1, K], bias [C], past [B, C, K - 1]. The padded sequence
// is past (or zeros) followed by x; output position l is the dot product of the weight with padded
// [l, l + K), present_state the last K - 1 positions of padded. Global (n0 >= Lx + K - 1, C, B), n0 rounded
// up so that the driver can pick a work-group along it: ids below Lx compute the output, the next K - 1 the
// state (present may be left out: has_present 0), the rest nothing.
__kernel void causal_conv_with_state(int Lx, int K, int has_bias, int has_past, int has_present, TSTORE* X,
                                     long x_off, TSTORE* W, long w_off, TSTORE* bias, long bias_off, TSTORE* past,
                                     long past_off, TSTORE* Y, long y_off, TSTORE* present, long pres_off) {
  const int l = get_global_id(0), c = get_global_id(1), b = get_global_id(2), C = get_global_size(1);
  const long row = (long)b * C + c;
  X += x_off + row * Lx;
  past += past_off + row * (K - 1);
  if (l < Lx) {
    W += w_off + (long)c * K;
    float acc = has_bias ? LOAD_T(bias + bias_off, c) : 0.0f;
    const int first = l - (K - 1);  // position in x of the first tap; negative: the taps start in the state
    if (first >= 0) {
      for (int j = 0; j < K; ++j) acc += LOAD_T(W, j) * LOAD_T(X, first + j);
    } else {
      for (int j = 0; j < K; ++j) {
        const int p = first + j;
        const float x = p >= 0 ? LOAD_T(X, p) : has_past ? LOAD_T(past, K - 1 + p) : 0.0f;
        acc += LOAD_T(W, j) * x;
      }
    }
#if SILU
    acc = acc / (1.0f + exp(-acc));
#endif
    STORE_T(Y + y_off + row * Lx, l, acc);
  } else if (has_present && l < Lx + K - 1) {
    const int j = l - Lx;  // 0 .. K - 2
    const int p = Lx + j - (K - 1);
    const float v = p >= 0 ? LOAD_T(X, p) : has_past ? LOAD_T(past, K - 1 + p) : 0.0f;
    STORE_T(present + pres_off + row * (K - 1), j, v);
  }
}

// LinearAttention: the recurrence over T steps for one column m of one KV head's state S [d_k, d_v].
// Every update rule acts on the columns independently (the delta rule's retrieval S^T k is per column),
// so each work-item owns one column and runs all T steps: one launch for the whole sequence. Per step t:
//   S *= exp(g_t)                               (gated rules; g per key dim or per head)
//   u = beta_t * (v_t[m] - S[:, m] . k_t)         (delta rules; else u = v_t[m])
//   S[:, m] += k_t * u
//   out[t, hq, m] = scale * q_t[hq] . S[:, m]     for the group_size query heads hq sharing this KV head
// q [B, T, Hq * d_k], k [B, T, Hkv * d_k], v [B, T, Hkv * d_v], decay [B, T, Hkv * decay_w] (decay_w
// d_k or 1), beta [B, T, beta_heads] (Hkv or 1), state [B, Hkv, d_k, d_v]. Global (n0 >= d_v, Hkv, B).
// With DK > 0 the work-group (along dim 0, within one head) first stages k_t and exp(g_t) in local memory,
// so each step takes d_k exps per work-group rather than per column; work-items past d_v only help load.
__kernel void linear_attention(int T, int Hq, int Hkv, int d_k, int d_v, int gated, int decay_w, int delta,
                               int beta_heads, int has_past, int has_present, float scale, TSTORE* Q, long q_off,
                               TSTORE* Kt, long k_off, TSTORE* V, long v_off, TSTORE* decay, long decay_off,
                               TSTORE* beta, long beta_off, SSTORE* past, long past_off, TSTORE* O, long o_off,
                               SSTORE* present, long pres_off, __global float* ws, long ws_off) {
  const int m = get_global_id(0), h = get_global_id(1), b = get_global_id(2);
  const bool active = m < d_v;
  const int group = Hq / Hkv;
  const long state_base = ((long)b * Hkv + h) * d_k * d_v + m;  // element (d, m) at state_base + d * d_v
#if DK > 0
  float S[DK];
  __local float kl[DK], el[DK];
  const int lid = get_local_id(0), lsize = get_local_size(0);
#define SCOL(d) S[d]
#define KT(d) kl[d]
  (void)ws;
  (void)ws_off;
#else
  __global float* Sg = ws + ws_off + state_base;
#define SCOL(d) Sg[(long)(d) * d_v]
#define KT(d) LOAD_T(Kt, kb + (d))
#endif
  if (active)
    for (int d = 0; d < d_k; ++d) SCOL(d) = has_past ? LOAD_S(past + past_off + state_base, (long)d * d_v) : 0.0f;
  Q += q_off;
  Kt += k_off;
  V += v_off;
  decay += decay_off;
  beta += beta_off;
  O += o_off;
  for (int t = 0; t < T; ++t) {
    const long bt = (long)b * T + t;
    const long kb = (bt * Hkv + h) * d_k;
#if DK > 0
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous step's reads of kl / el are done
    for (int d = lid; d < d_k; d += lsize) {
      kl[d] = LOAD_T(Kt, kb + d);
      if (gated && decay_w != 1) el[d] = exp(LOAD_T(decay, kb + d));
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    if (!active) continue;
    if (gated) {
      if (decay_w == 1) {
        const float f = exp(LOAD_T(decay, bt * Hkv + h));
        for (int d = 0; d < d_k; ++d) SCOL(d) *= f;
      } else {
        for (int d = 0; d < d_k; ++d)
#if DK > 0
          SCOL(d) *= el[d];
#else
          SCOL(d) *= exp(LOAD_T(decay, kb + d));
#endif
      }
    }
    float u = LOAD_T(V, (bt * Hkv + h) * d_v + m);
    if (delta) {
      float r = 0.0f;
      for (int d = 0; d < d_k; ++d) r += SCOL(d) * KT(d);
      u = LOAD_T(beta, bt * beta_heads + (beta_heads == 1 ? 0 : h)) * (u - r);
    }
    for (int d = 0; d < d_k; ++d) SCOL(d) += KT(d) * u;
    for (int g = 0; g < group; ++g) {
      const int hq = h * group + g;
      const long qb = (bt * Hq + hq) * d_k;
      float o = 0.0f;
      for (int d = 0; d < d_k; ++d) o += LOAD_T(Q, qb + d) * SCOL(d);
      STORE_T(O, (bt * Hq + hq) * d_v + m, scale * o);
    }
  }
  if (has_present && active)
    for (int d = 0; d < d_k; ++d) STORE_S(present + pres_off + state_base, (long)d * d_v, SCOL(d));
#undef SCOL
#undef KT
}
