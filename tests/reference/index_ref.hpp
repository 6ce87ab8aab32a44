// Plain C++ references for the index ops (ScatterElements, ScatterND, GatherND, OneHot, Hardmax, Einsum,
// MaxUnpool, NonZero, Trilu), written from the ONNX spec for clarity, in double, independent of the kernels.
// Values are doubles, indices int64 (negative counts from the end; out-of-range ones are skipped by the
// scatters and read as 0 by GatherND, as the kernels define it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cnn_ref.hpp"

namespace cldl::ref {

// reduction: "none", "add", "mul", "max", "min"; updates in index order.
std::vector<double> scatter_elements(std::vector<double> data, const Dims& d, const std::vector<int64_t>& idx,
                                     const Dims& id, const std::vector<double>& upd, int axis,
                                     const std::string& reduction);
std::vector<double> scatter_nd(std::vector<double> data, const Dims& d, const std::vector<int64_t>& idx, const Dims& id,
                               const std::vector<double>& upd, const std::string& reduction);
std::vector<double> gather_nd(const std::vector<double>& data, const Dims& d, const std::vector<int64_t>& idx,
                              const Dims& id, int batch_dims, Dims& od);
std::vector<double> one_hot(const std::vector<double>& idx, const Dims& id, int64_t depth, int axis, double off,
                            double on, Dims& od);
std::vector<double> hardmax(const std::vector<double>& x, const Dims& d, int axis);
// Each trailing [N, M] matrix: x where column - row >= k (upper) or <= k (lower), else 0.
std::vector<double> trilu(const std::vector<double>& x, const Dims& d, int64_t k, bool upper);
// Explicit or implicit equations with letters and '...'; loops over every combination of every label.
std::vector<double> einsum(const std::string& equation, const std::vector<std::vector<double>>& xs,
                           const std::vector<Dims>& ds, Dims& od);
// Indices flat over `unpooled`; the result has shape `out` (>= unpooled per dim), unpooled in its corner.
std::vector<double> max_unpool(const std::vector<double>& x, const std::vector<int64_t>& idx, const Dims& unpooled,
                               const Dims& out);
// [rank, count] row-major coordinates of the non-zero elements.
std::vector<int64_t> non_zero(const std::vector<double>& x, const Dims& d, Dims& od);

}  // namespace cldl::ref
