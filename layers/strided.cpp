// N-d layout helpers: broadcasting, strides, collapsing iteration spaces.
#include "layers/strided.hpp"

#include <algorithm>

#include "layers/op.hpp"

namespace cldl {

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.rank());
  int64_t acc = 1;
  for (size_t i = s.rank(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

Shape broadcast_shapes(std::string_view op, const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.rank());
  Shape out(std::vector<int64_t>(rank, 1));
  for (size_t k = 0; k < shapes.size(); ++k) {
    const Shape& s = shapes[k];
    for (size_t i = 0; i < s.rank(); ++i) {
      size_t o = rank - s.rank() + i;
      int64_t d = s[i];
      if (d < 0) invalid(op, "input {} has a negative dimension in shape {}", k, s.str());
      if (out[o] == 1) {
        out[o] = d;
      } else if (d != 1 && d != out[o]) {
        invalid(op, "input {} of shape {} does not broadcast with the others (dimension {} is {}, expected 1 or {})",
                k, s.str(), i, d, out[o]);
      }
    }
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(out.rank(), 0);
  auto cs = contiguous_strides(in);
  for (size_t i = 0; i < in.rank(); ++i) {
    size_t o = out.rank() - in.rank() + i;
    st[o] = in[i] == 1 ? 0 : cs[i];
  }
  return st;
}

int normalize_axis(std::string_view op, std::string_view arg, int64_t axis, size_t rank, bool allow_end) {
  int64_t r = static_cast<int64_t>(rank) + (allow_end ? 1 : 0);
  if (axis < -r || axis >= r)
    invalid(op, "{} {} is out of range for rank {} (expected [{}, {}])", arg, axis, rank, -r, r - 1);
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

int64_t Iteration::outer() const {
  int64_t n = 1;
  for (int i = 0; i + 1 < rank; ++i) n *= dims[i];
  return n;
}

cl::NDRange Iteration::range3(size_t group) const {
  int64_t rest = 1;
  for (int i = 0; i + 2 < rank; ++i) rest *= dims[i];
  return cl::NDRange(round_up(size_t(inner()), group), size_t(rank >= 2 ? dims[rank - 2] : 1), size_t(rest));
}

cl_long8 Iteration::dims8() const {
  cl_long8 v{};
  for (int i = 0; i < kMaxRank; ++i) v.s[i] = dims[i];
  return v;
}

cl_long8 Iteration::strides8(size_t k) const {
  cl_long8 v{};
  for (int i = 0; i < kMaxRank; ++i) v.s[i] = strides[k][i];
  return v;
}

Iteration collapse(std::string_view op, const std::vector<int64_t>& dims,
                   const std::vector<std::vector<int64_t>>& strides) {
  // Keep the dims that are not 1, then merge i into i+1 when every operand has stride[i] ==
  // stride[i+1] * dims[i+1] (walking i then i+1 is one contiguous walk).
  std::vector<int64_t> d;
  std::vector<std::vector<int64_t>> s(strides.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    bool merge = !d.empty();
    for (size_t k = 0; k < strides.size() && merge; ++k) merge = s[k].back() == strides[k][i] * dims[i];
    if (merge) {
      d.back() *= dims[i];
      for (size_t k = 0; k < strides.size(); ++k) s[k].back() = strides[k][i];
    } else {
      d.push_back(dims[i]);
      for (size_t k = 0; k < strides.size(); ++k) s[k].push_back(strides[k][i]);
    }
  }
  if (d.empty()) {
    d.push_back(1);
    for (auto& v : s) v.push_back(0);
  }
  if (d.size() > static_cast<size_t>(kMaxRank))
    invalid(op, "the iteration space has {} dimensions after collapsing; at most {} are supported", d.size(),
            kMaxRank);
  Iteration it;
  it.rank = static_cast<int>(d.size());
  it.dims.fill(1);
  it.strides.assign(strides.size(), {});
  for (size_t i = 0; i < d.size(); ++i) {
    it.dims[i] = d[i];
    for (size_t k = 0; k < s.size(); ++k) it.strides[k][i] = s[k][i];
  }
  return it;
}

}  // namespace cldl

#include "runtime/device.hpp"

namespace cldl {
size_t reduction_group_size(const cl::Kernel& k, const Device& dev, size_t cap) {
  size_t lim = std::min(cap, k.getWorkGroupInfo<CL_KERNEL_WORK_GROUP_SIZE>(dev.device));
  size_t g = 1;
  while (g * 2 <= lim) g *= 2;
  return g;
}
}  // namespace cldl

namespace cldl {
size_t row_group_size(const cl::Kernel& k, const Device& dev, int64_t inner) {
  size_t g = reduction_group_size(k, dev, 64);
  while (g > 1 && int64_t(g / 2) >= inner) g /= 2;
  return g;
}
}  // namespace cldl

namespace cldl {
cl::NDRange plane_batch_local_size(const cl::Kernel& k, const Device& dev, size_t w, size_t h, size_t planes,
                                   size_t target) {
  const size_t lim = std::min(target, k.getWorkGroupInfo<CL_KERNEL_WORK_GROUP_SIZE>(dev.device));
  const size_t plane = w * h;
  if (plane == 0 || planes == 0 || plane > lim) return cl::NullRange;
  // Each dimension within the device's work-item sizes too: NVIDIA's third is 64, and a 1x1 plane batched
  // 128 deep failed to launch there (SSDlite's last head convolutions).
  const std::vector<size_t>& dims = dev.info.max_work_item_sizes;
  if (dims.size() < 3 || w > dims[0] || h > dims[1]) return cl::NullRange;
  size_t g = std::min({planes, lim / plane, dims[2]});
  while (g > 1 && planes % g) --g;
  return cl::NDRange(w, h, g);
}
}  // namespace cldl

namespace cldl {
PaddedLaunch padded_launch(int64_t gx, int64_t gy, int64_t gz, size_t items) {
  auto pow2_at_least = [](int64_t n) {
    size_t p = 1;
    while (int64_t(p) < n) p *= 2;
    return p;
  };
  const size_t lx = std::min(pow2_at_least(gx), items);
  const size_t ly = std::min(pow2_at_least(gy), std::max<size_t>(items / lx, 1));
  return {cl::NDRange(round_up(size_t(gx), lx), round_up(size_t(gy), ly), size_t(gz)), cl::NDRange(lx, ly, 1)};
}
}  // namespace cldl
