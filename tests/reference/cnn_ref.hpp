// Plain C++ references for the CNN / tensor ops (element-wise, pooling, norms, softmax, MatMul, data
// movement, reductions). Written for clarity, in double where it matters, independent of the kernels.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/tensor.hpp"

namespace cldl::ref {

using Dims = std::vector<int64_t>;

int64_t numel(const Dims& d);
// Coordinates of flat index i in d (row-major).
Dims unravel(int64_t i, const Dims& d);
// Flat index into `in` (rank-aligned from the right, broadcast dims read at 0) of output coords c.
int64_t bcast_index(const Dims& c, const Dims& in);
Dims bcast_shape(const Dims& a, const Dims& b);

// out[i] = f(a[bcast], b[bcast]) over the broadcast shape.
template <typename T, typename R>
std::vector<R> binary(const std::vector<T>& a, const Dims& da, const std::vector<T>& b, const Dims& db,
                      const std::function<R(T, T)>& f, Dims& out_dims) {
  out_dims = bcast_shape(da, db);
  std::vector<R> out(numel(out_dims));
  for (int64_t i = 0; i < numel(out_dims); ++i) {
    Dims c = unravel(i, out_dims);
    out[i] = f(a[bcast_index(c, da)], b[bcast_index(c, db)]);
  }
  return out;
}

// Pooling over (D, H, W) spatial dims (1-D / 2-D pools use D = H = 1 / D = 1). k, s, d, pb, pe per dim.
struct PoolParams {
  bool max = true;
  std::array<int, 3> k{1, 1, 1}, s{1, 1, 1}, d{1, 1, 1}, pb{0, 0, 0}, pe{0, 0, 0};
  bool ceil_mode = false, count_include_pad = false;
  bool column_major = false;  // MaxPool Indices with storage_order 1 (first spatial dim fastest)
  int lp = 0;                 // > 0: LpPool with this p (max is ignored)
};
// Returns Y; out receives the output spatial sizes, idx (when non-null) MaxPool's flat argmax indices.
std::vector<float> pool3d(const std::vector<float>& x, int N, int C, std::array<int, 3> in, const PoolParams& p,
                          std::array<int, 3>& out, std::vector<int64_t>* idx = nullptr);

// Normalisation over groups of channels: G == C is InstanceNorm; scale/bias per channel.
std::vector<float> group_norm(const std::vector<float>& x, int N, int C, int64_t spatial, int G,
                              const std::vector<float>& scale, const std::vector<float>& bias, float eps);
std::vector<float> batch_norm(const std::vector<float>& x, int N, int C, int64_t spatial,
                              const std::vector<float>& scale, const std::vector<float>& bias,
                              const std::vector<float>& mean, const std::vector<float>& var, float eps);
// Training mode (ONNX training_mode 1): batch mean / population variance per channel in double;
// run_mean / run_var receive mean * momentum + batch * (1 - momentum).
std::vector<float> batch_norm_training(const std::vector<float>& x, int N, int C, int64_t spatial,
                                       const std::vector<float>& scale, const std::vector<float>& bias,
                                       const std::vector<float>& mean, const std::vector<float>& var, float eps,
                                       float momentum, std::vector<float>& run_mean, std::vector<float>& run_var);

// LRN across channels (ONNX): x / (bias + alpha / size * sum of squares over the channel window)^beta.
std::vector<float> lrn(const std::vector<float>& x, int N, int C, int64_t spatial, int size, float alpha, float beta,
                       float bias);

std::vector<float> softmax(const std::vector<float>& x, const Dims& d, int axis, bool log);

// numpy matmul (1-D operands promoted and the added dim removed).
std::vector<float> matmul(const std::vector<float>& a, const Dims& da, const std::vector<float>& b, const Dims& db,
                          Dims& out_dims);

// Data movement, on any element type stored as int64 for exactness.
std::vector<float> transpose(const std::vector<float>& x, const Dims& d, const std::vector<int>& perm, Dims& od);
std::vector<float> slice(const std::vector<float>& x, const Dims& d, const Dims& starts, const Dims& ends,
                         const Dims& axes, const Dims& steps, Dims& od);
std::vector<float> pad(const std::vector<float>& x, const Dims& d, const Dims& pads, int mode, float value,
                       Dims& od);  // mode 0 constant, 1 reflect, 2 edge, 3 wrap
std::vector<float> gather(const std::vector<float>& x, const Dims& d, const std::vector<int64_t>& idx,
                          const Dims& id, int axis, Dims& od);
// ONNX CumSum along `axis` (double accumulation).
std::vector<double> cumsum(const std::vector<double>& x, const Dims& d, int axis, bool exclusive, bool reverse);
// ONNX GatherElements (output shape = id; negative indices count from the end).
std::vector<float> gather_elements(const std::vector<float>& x, const Dims& d, const std::vector<int64_t>& idx,
                                   const Dims& id, int axis);
std::vector<float> tile(const std::vector<float>& x, const Dims& d, const Dims& reps, Dims& od);

// Resize of the last two dims; mode 0 nearest 1 linear 2 cubic; coord / nearest numbered as in
// kernels/data.cl (6 = tf_crop_and_resize, region `roi`, extrapolation outside the input). sh / sw:
// the scales (out / in in double when sizes are given, as ONNX computes them).
struct ResizeExtra {
  bool antialias = false;                // linear / cubic filters stretched by 1 / scale when downscaling
  std::array<float, 4> roi{0, 0, 1, 1};  // start h, start w, end h, end w
  float extrapolation = 0.0f;
};
std::vector<float> resize2d(const std::vector<float>& x, int64_t planes, int H, int W, int OH, int OW, double sh,
                            double sw, int mode, int coord, int nearest, float cubic_a = -0.75f,
                            bool exclude_outside = false, const ResizeExtra& extra = {});

// Reductions over `axes` (empty = all); op 0 sum 1 mean 2 max 3 min 4 prod 5 sumsquare 6 l2 7 l1.
std::vector<float> reduce(const std::vector<float>& x, const Dims& d, std::vector<int> axes, bool keepdims, int op,
                          Dims& od);

}  // namespace cldl::ref
