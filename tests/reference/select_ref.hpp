// Plain C++ references for the selection and scan ops (TopK, ReverseSequence, CumProd, Compress, Unique), written from
// the ONNX spec for clarity, in double, independent of the kernels and of the host folds in models/ops_select.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "cnn_ref.hpp"

namespace cldl::ref {

// The k largest (or smallest) along `axis`, sorted; equal values by the lower index first; NaN above
// every number. Indices into the axis.
void topk(const std::vector<double>& x, const Dims& d, int64_t k, int axis, bool largest, std::vector<double>& values,
          std::vector<int64_t>& indices);
// The first lens[b] steps of each batch entry reversed (time and batch: the axes 0 and 1 in either order).
std::vector<double> reverse_sequence(const std::vector<double>& x, const Dims& d, const std::vector<int64_t>& lens,
                                     int time_axis, int batch_axis);
// Running products along `axis` (exclusive: the product before the element; reverse: from the end).
std::vector<double> cumprod(const std::vector<double>& x, const Dims& d, int axis, bool exclusive, bool reverse);
// The slices along `axis` (axis < 0: of the flattened input) whose condition is true.
std::vector<double> compress(const std::vector<double>& x, const Dims& d, const std::vector<bool>& cond, int axis,
                             Dims& od);
// Unique of the flattened input: values, first-occurrence indices, inverse indices, counts.
void unique(const std::vector<double>& x, bool sorted, std::vector<double>& y, std::vector<int64_t>& first,
            std::vector<int64_t>& inverse, std::vector<int64_t>& counts);

}  // namespace cldl::ref
