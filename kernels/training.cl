// Training ops on f32 (layers/training.cpp): NegativeLogLikelihoodLoss and the loss half of
// SoftmaxCrossEntropyLoss (its log-softmax over C runs softmax.cl first), and the optimizer updates of
// ai.onnx.preview.training (Adagrad, Momentum, Adam). They follow the ONNX reference implementations
// (onnx/reference/ops) step by step, accumulating in fp32.
// Macros (set by layers/training.cpp, defaults correct everywhere):
//   TARGET_T     the element type of the loss targets (long: int64, int: int32)
//   LOSS_GROUP   the work-group size of loss_partial and loss_finish (a power of two)

#ifndef TARGET_T
#define TARGET_T long
#endif
#ifndef LOSS_GROUP
#define LOSS_GROUP 64
#endif

// The loss term and the weight of position p = n * inner + d of a [N, C, inner] input of log-probabilities:
// (-x[n, t, d] * w[t], w[t]) for target t = target[p] (w = 1 without weights); (0, 0) where t is ignore_index.
// A target outside [0, C) that is not ignore_index gives (NaN, NaN), so that a wrong class id shows in the loss
// instead of reading another class's value (a kernel cannot raise; targets known when planning are refused then).
inline float2 nll_term(long p, long classes, long inner, int has_ignore, long ignore_index, int has_weight,
                       __global const float* x, __global const TARGET_T* target, __global const float* w) {
  const long n = p / inner, d = p - n * inner;
  const long t = (long)target[p];
  if (has_ignore && t == ignore_index) return (float2)(0.0f, 0.0f);
  if (t < 0 || t >= classes) return (float2)(NAN, NAN);
  const float wt = has_weight ? w[t] : 1.0f;
  return (float2)(-x[(n * classes + t) * inner + d] * wt, wt);
}

// reduction = none: one work-item per position writes its loss.
__kernel void loss_none(long classes, long inner, int has_ignore, long ignore_index, int has_weight,
                        __global const float* x, long x_off, __global const TARGET_T* target, long t_off,
                        __global const float* w, long w_off, __global float* y, long y_off) {
  const long p = get_global_id(0);
  y[y_off + p] = nll_term(p, classes, inner, has_ignore, ignore_index, has_weight, x + x_off, target + t_off, w + w_off).x;
}

// reduction = sum / mean in two launches of LOSS_GROUP-wide work-groups. loss_partial: each work-item sums the loss
// terms and weights of every global-size-th position, a tree in local memory adds a group's, and the group writes its
// (loss, weight) pair to part[2g], part[2g + 1]. loss_finish: one work-group adds the pairs the same way and writes
// the sum, or for mean the loss sum over the weight sum (the count of non-ignored targets without weights), as the
// ONNX reference does: NaN when every target is ignored. A fixed order throughout: the same bits every run.
inline float2 group_sum(float2 acc, __local float2* part) {
  const int lid = get_local_id(0);
  part[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = LOSS_GROUP / 2; s > 0; s >>= 1) {
    if (lid < s) part[lid] += part[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  return part[0];
}

__kernel __attribute__((reqd_work_group_size(LOSS_GROUP, 1, 1))) void loss_partial(
    long count, long classes, long inner, int has_ignore, long ignore_index, int has_weight,
    __global const float* x, long x_off, __global const TARGET_T* target, long t_off, __global const float* w,
    long w_off, __global float* part, long part_off) {
  __local float2 scratch[LOSS_GROUP];
  float2 acc = (float2)(0.0f, 0.0f);
  for (long p = get_global_id(0); p < count; p += get_global_size(0))
    acc += nll_term(p, classes, inner, has_ignore, ignore_index, has_weight, x + x_off, target + t_off, w + w_off);
  const float2 s = group_sum(acc, scratch);
  if (get_local_id(0) == 0) {
    part[part_off + 2 * get_group_id(0)] = s.x;
    part[part_off + 2 * get_group_id(0) + 1] = s.y;
  }
}

__kernel __attribute__((reqd_work_group_size(LOSS_GROUP, 1, 1))) void loss_finish(
    int groups, int mean, __global const float* part, long part_off, __global float* y, long y_off) {
  __local float2 scratch[LOSS_GROUP];
  float2 acc = (float2)(0.0f, 0.0f);
  for (int g = get_local_id(0); g < groups; g += LOSS_GROUP)
    acc += (float2)(part[part_off + 2 * g], part[part_off + 2 * g + 1]);
  const float2 s = group_sum(acc, scratch);
  if (get_local_id(0) == 0) y[y_off] = mean ? s.x / s.y : s.x;
}

// ---------------------------------------------------------------- optimizers
// One work-item per element of one (X, G, state) group; R (the learning rate, f32) and T (the step count, i64)
// are one-element device tensors read by every work-item, so a training loop needs no host read-back. The
// regularized gradient is g + norm_coefficient * x in all three.

// Adagrad: r' = R / (1 + T * decay_factor); H' = H + g^2; X' = X - r' * g / (sqrt(H') + epsilon).
__kernel void adagrad(float decay_factor, float epsilon, float norm_coefficient, __global const float* r, long r_off,
                      __global const long* t, long t_off, __global const float* x, long x_off,
                      __global const float* g, long g_off, __global const float* h, long h_off, __global float* x_new,
                      long xn_off, __global float* h_new, long hn_off) {
  const long i = get_global_id(0);
  const float lr = r[r_off] / (1.0f + (float)t[t_off] * decay_factor);
  const float xv = x[x_off + i];
  const float gr = norm_coefficient * xv + g[g_off + i];
  const float hv = h[h_off + i] + gr * gr;
  x_new[xn_off + i] = xv - lr * gr / (sqrt(hv) + epsilon);
  h_new[hn_off + i] = hv;
}

// Momentum: V' = alpha * V + beta' * g (beta' = 1 at T = 0, else beta); standard: X' = X - R * V',
// nesterov: X' = X - R * (g + alpha * V').
__kernel void momentum(int nesterov, float alpha, float beta, float norm_coefficient, __global const float* r,
                       long r_off, __global const long* t, long t_off, __global const float* x, long x_off,
                       __global const float* g, long g_off, __global const float* v, long v_off,
                       __global float* x_new, long xn_off, __global float* v_new, long vn_off) {
  const long i = get_global_id(0);
  const float lr = r[r_off];
  const float beta_t = t[t_off] > 0 ? beta : 1.0f;
  const float xv = x[x_off + i];
  const float gr = norm_coefficient * xv + g[g_off + i];
  const float vv = alpha * v[v_off + i] + beta_t * gr;
  x_new[xn_off + i] = xv - lr * (nesterov ? gr + alpha * vv : vv);
  v_new[vn_off + i] = vv;
}

// Adam: V' = alpha * V + (1 - alpha) * g; H' = beta * H + (1 - beta) * g^2; the rate is bias-corrected for T > 0,
// r' = R * sqrt(1 - beta^T) / (1 - alpha^T); X' = (1 - norm_coefficient_post) * (X - r' * V' / (sqrt(H') + eps)).
__kernel void adam(float alpha, float beta, float epsilon, float norm_coefficient, float norm_coefficient_post,
                   __global const float* r, long r_off, __global const long* t, long t_off, __global const float* x,
                   long x_off, __global const float* g, long g_off, __global const float* v, long v_off,
                   __global const float* h, long h_off, __global float* x_new, long xn_off, __global float* v_new,
                   long vn_off, __global float* h_new, long hn_off) {
  const long i = get_global_id(0);
  const long step = t[t_off];
  float lr = r[r_off];
  if (step > 0) lr = lr * sqrt(1.0f - pow(beta, (float)step)) / (1.0f - pow(alpha, (float)step));
  const float xv = x[x_off + i];
  const float gr = norm_coefficient * xv + g[g_off + i];
  const float vv = alpha * v[v_off + i] + (1.0f - alpha) * gr;
  const float hv = beta * h[h_off + i] + (1.0f - beta) * (gr * gr);
  x_new[xn_off + i] = (1.0f - norm_coefficient_post) * (xv - lr * (vv / (sqrt(hv) + epsilon)));
  v_new[vn_off + i] = vv;
  h_new[hn_off + i] = hv;
}
