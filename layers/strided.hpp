// N-d layout helpers shared by the element-wise, data-movement and reduction ops: numpy broadcasting,
// element strides, and collapsing an iteration space (shape + one stride set per operand) to the fewest
// dimensions before it is handed to a kernel as long8 arguments.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/cl.hpp"
#include "runtime/tensor.hpp"

namespace cldl {

// Kernels take at most this many dimensions (one long8 per operand).
constexpr int kMaxRank = 8;

// Row-major element strides of a contiguous tensor.
std::vector<int64_t> contiguous_strides(const Shape& s);

// numpy broadcast of several shapes; throws invalid(op, ...) naming the two shapes that clash.
Shape broadcast_shapes(std::string_view op, const std::vector<Shape>& shapes);

// Strides (elements) to read `in` (contiguous) while iterating over `out`: 0 on broadcast dimensions,
// and rank-aligned from the right as numpy does.
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

// Normalises an ONNX axis in [-rank, rank) (or [-rank-1, rank] when `allow_end`); throws naming the op.
int normalize_axis(std::string_view op, std::string_view arg, int64_t axis, size_t rank, bool allow_end = false);

// An iteration space for a kernel: dims[0..rank) with the innermost last, and per operand a stride for
// each dimension.
struct Iteration {
  int rank = 1;
  std::array<int64_t, kMaxRank> dims{};
  std::vector<std::array<int64_t, kMaxRank>> strides;  // one per operand
  int64_t inner() const { return dims[rank - 1]; }
  int64_t outer() const;  // product of all dims but the innermost
  // The 3-D launch the element-wise / copy kernels use: (innermost, next, rest flattened), and the
  // scalar strides of the two inner dims for operand k.
  // With group > 1, dim 0 is rounded up to a multiple of it (kernels then check x < inner).
  cl::NDRange range3(size_t group = 1) const;
  cl_long inner_stride(size_t k) const { return strides[k][rank - 1]; }
  cl_long mid_stride(size_t k) const { return rank >= 2 ? strides[k][rank - 2] : 0; }
  cl_long8 dims8() const;
  cl_long8 strides8(size_t operand) const;
};

// Drops size-1 dims and merges neighbours that every operand walks contiguously. Throws naming `op`
// when more than kMaxRank dims remain.
Iteration collapse(std::string_view op, const std::vector<int64_t>& dims,
                   const std::vector<std::vector<int64_t>>& strides);

}  // namespace cldl

namespace cldl {
struct Device;
// Work-group size for a local-memory tree reduction: the largest power of two <= cap that the kernel
// and the device allow.
size_t reduction_group_size(const cl::Kernel& k, const Device& dev, size_t cap = 64);
}  // namespace cldl

namespace cldl {
// Work-group size along the innermost dim of a 3-D element-wise launch: 64 (capped by the kernel and
// device limits, and by `inner` rounded up to a power of two), so a CPU runtime gets rows it can
// vectorise and a GPU gets coalesced rows, without relying on the driver's choice for odd sizes.
size_t row_group_size(const cl::Kernel& k, const Device& dev, int64_t inner);
}  // namespace cldl

namespace cldl {
// Local size for a launch over (w, h, planes) where every work-item is independent: whole (w, h) planes
// per work-group, batched along the plane axis up to `target` items (a divisor of `planes`, since
// OpenCL 1.2 needs the global size to be a multiple). Small planes otherwise become one work-group each,
// and a CPU runtime pays its per-group cost thousands of times (7200 groups of 16 items: 5.8 ms on PoCL
// for a 450x16x8x8 max pool, 0.4 ms batched). Returns NullRange when a plane alone is too large.
cl::NDRange plane_batch_local_size(const cl::Kernel& k, const Device& dev, size_t w, size_t h, size_t planes,
                                   size_t target = 256);
}  // namespace cldl

namespace cldl {
// A CPU launch of independent work-items over (gx, gy, gz) where each item does a block of work (a tile,
// a run, a strip of outputs): local (lx, ly, 1) of about `items` items, and the global size padded up to
// it (kernels return for items past (gx, gy)). A CPU runtime pays about a microsecond per work-group, so
// one group per item is too many, and a NullRange lets it pick one group for everything.
struct PaddedLaunch {
  cl::NDRange global, local;
};
PaddedLaunch padded_launch(int64_t gx, int64_t gy, int64_t gz, size_t items = 64);
}  // namespace cldl
