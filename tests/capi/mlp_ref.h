/* The test model's weights and a plain C reference of it (shared by the C tests and the model maker). */
#ifndef CLDL_TESTS_MLP_REF_H
#define CLDL_TESTS_MLP_REF_H

#define MLP_IN 5
#define MLP_OUT 7

static inline float mlp_weight(int o, int i) { return (float)((o * 5 + i * 3) % 11 - 5) * 0.125f; }
static inline float mlp_bias(int o) { return (float)(o % 3 - 1) * 0.5f; }

/* y[n][o] = max(0, sum_i x[n][i] W[o][i] + b[o]) */
static inline void mlp_reference(const float* x, int batch, float* y) {
  for (int n = 0; n < batch; ++n)
    for (int o = 0; o < MLP_OUT; ++o) {
      float acc = mlp_bias(o);
      for (int i = 0; i < MLP_IN; ++i) acc += x[n * MLP_IN + i] * mlp_weight(o, i);
      y[n * MLP_OUT + o] = acc > 0.f ? acc : 0.f;
    }
}

/* branch.onnx: z = relu(x W^T + b) + x V^T with V = -W / 2 */
static inline void branch_reference(const float* x, int batch, float* z) {
  int n, o, i;
  mlp_reference(x, batch, z);
  for (n = 0; n < batch; ++n)
    for (o = 0; o < MLP_OUT; ++o)
      for (i = 0; i < MLP_IN; ++i) z[n * MLP_OUT + o] += x[n * MLP_IN + i] * -0.5f * mlp_weight(o, i);
}

#endif
