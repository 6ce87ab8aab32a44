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
// One launch updates up to OPT_SLOTS tensors (layers/training.cpp launches ceil(n / OPT_SLOTS) times): slot k has
// its buffers and offsets and its element count n_k; work-item i belongs to the first slot whose running count
// passes it. R (the learning rate, f32) and T (the step count, i64) are one-element device tensors read by every
// work-item, so a training loop needs no host read-back. The regularized gradient is g + norm_coefficient * x.
#define OPT_SLOTS 8

// Adagrad: r' = R / (1 + T * decay_factor); H' = H + g^2; X' = X - r' * g / (sqrt(H') + epsilon).
inline void adagrad_elem(float lr, float epsilon, float norm_coefficient, __global const float* x,
                         __global const float* g, __global const float* h, __global float* x_new, __global float* h_new,
                         long i) {
  const float xv = x[i];
  const float gr = norm_coefficient * xv + g[i];
  const float hv = h[i] + gr * gr;
  x_new[i] = xv - lr * gr / (sqrt(hv) + epsilon);
  h_new[i] = hv;
}

// Momentum: V' = alpha * V + beta' * g (beta' = 1 at T = 0, else beta); standard: X' = X - R * V',
// nesterov: X' = X - R * (g + alpha * V').
inline void momentum_elem(int nesterov, float alpha, float beta_t, float norm_coefficient, float lr,
                          __global const float* x, __global const float* g, __global const float* v,
                          __global float* x_new, __global float* v_new, long i) {
  const float xv = x[i];
  const float gr = norm_coefficient * xv + g[i];
  const float vv = alpha * v[i] + beta_t * gr;
  x_new[i] = xv - lr * (nesterov ? gr + alpha * vv : vv);
  v_new[i] = vv;
}

// Adam: V' = alpha * V + (1 - alpha) * g; H' = beta * H + (1 - beta) * g^2; the rate is bias-corrected for T > 0,
// r' = R * sqrt(1 - beta^T) / (1 - alpha^T); X' = (1 - norm_coefficient_post) * (X d - r' * V' / (sqrt(H') + eps))
// with d = 1 - R * decay (AdamW's decoupled weight decay, torch.optim.AdamW; 1 for the ONNX op).
inline void adam_elem(float alpha, float beta, float epsilon, float norm_coefficient, float norm_coefficient_post,
                      float lr, float d, __global const float* x, __global const float* g, __global const float* v,
                      __global const float* h, __global float* x_new, __global float* v_new, __global float* h_new,
                      long i) {
  const float xv = x[i];
  const float gr = norm_coefficient * xv + g[i];
  const float vv = alpha * v[i] + (1.0f - alpha) * gr;
  const float hv = beta * h[i] + (1.0f - beta) * (gr * gr);
  x_new[i] = (1.0f - norm_coefficient_post) * (xv * d - lr * (vv / (sqrt(hv) + epsilon)));
  v_new[i] = vv;
  h_new[i] = hv;
}

// Five buffers per slot (Adagrad: X, G, H, X', H'; Momentum: X, G, V, X', V'), seven for Adam (X, G, V, H, X', V', H').
#define SLOT5(k)                                                                                              \
  __global const float *a##k, long ao##k, __global const float *b##k, long bo##k, __global const float *c##k, \
      long co##k, __global float *d##k, long do##k, __global float *e##k, long eo##k, long n##k
#define SLOT7(k) SLOT5(k), __global const float *f##k, long fo##k, __global float *h##k, long ho##k
#define SLOTS(S) S(0), S(1), S(2), S(3), S(4), S(5), S(6), S(7)
// Runs CALL(k) for the slot of work-item i (i made relative to it).
#define FIND_SLOT(CALL) \
  FIND1(0, CALL)        \
  FIND1(1, CALL) FIND1(2, CALL) FIND1(3, CALL) FIND1(4, CALL) FIND1(5, CALL) FIND1(6, CALL) FIND1(7, CALL)
#define FIND1(k, CALL) \
  if (i < n##k) {      \
    CALL(k);           \
    return;            \
  }                    \
  i -= n##k;

__kernel void adagrad(float decay_factor, float epsilon, float norm_coefficient, __global const float* r, long r_off,
                      __global const long* t, long t_off, SLOTS(SLOT5)) {
  long i = get_global_id(0);
  const float lr = r[r_off] / (1.0f + (float)t[t_off] * decay_factor);
#define ADAGRAD(k) \
  adagrad_elem(lr, epsilon, norm_coefficient, a##k + ao##k, b##k + bo##k, c##k + co##k, d##k + do##k, e##k + eo##k, i)
  FIND_SLOT(ADAGRAD)
}

__kernel void momentum(int nesterov, float alpha, float beta, float norm_coefficient, __global const float* r,
                       long r_off, __global const long* t, long t_off, SLOTS(SLOT5)) {
  long i = get_global_id(0);
  const float lr = r[r_off];
  const float beta_t = t[t_off] > 0 ? beta : 1.0f;
#define MOMENTUM(k)                                                                                                    \
  momentum_elem(nesterov, alpha, beta_t, norm_coefficient, lr, a##k + ao##k, b##k + bo##k, c##k + co##k, d##k + do##k, \
                e##k + eo##k, i)
  FIND_SLOT(MOMENTUM)
}

// Slot buffers for Adam: a X, b G, c V, f H; d X', e V', h H'.
__kernel void adam(float alpha, float beta, float epsilon, float norm_coefficient, float norm_coefficient_post,
                   float decay, __global const float* r, long r_off, __global const long* t, long t_off, SLOTS(SLOT7)) {
  long i = get_global_id(0);
  const float rate = r[r_off];
  // The bias-corrected rate, once per work-group: two pow calls per element took three quarters of the update's
  // time on PoCL (scalar library calls in the work-item loop).
  __local float lr_group;
  if (get_local_id(0) == 0) {
    const long step = t[t_off];
    float lr = rate;
    if (step > 0) lr = lr * sqrt(1.0f - pow(beta, (float)step)) / (1.0f - pow(alpha, (float)step));
    lr_group = lr;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const float lr = lr_group;
  const float d = 1.0f - rate * decay;
#define ADAM(k)                                                                                               \
  adam_elem(alpha, beta, epsilon, norm_coefficient, norm_coefficient_post, lr, d, a##k + ao##k, b##k + bo##k, \
            c##k + co##k, f##k + fo##k, d##k + do##k, e##k + eo##k, h##k + ho##k, i)
  FIND_SLOT(ADAM)
}
