// Launch sizes that do not follow the problem size, for kernels that run at every shape of a dynamic
// model (generated element-wise kernels, Gather).
//
// Why: with a NullRange local size the driver picks one per global size, and a CPU runtime that compiles
// a work-group function per local size (PoCL: an LLVM compile, tens of ms, per kernel and local size)
// then compiles again at every new input shape. PoCL's cache held 112 local sizes of one generated Add
// after a few hundred MiniLM shapes. A local size taken from the device and from the dims a model fixes
// (a hidden size, a head size) is compiled once per kernel; the global size is padded up to it and the
// kernels return for items past the end. Where padding a short dim all the way would cost the run (a copy
// or an element-wise kernel over 12 heads padded to 32 rows), the group covers the dim up to a power of
// two instead: at most a handful of local sizes per kernel (1, 2, 4, ... up to the cap), all met after a
// few small shapes, against one per shape before.
#pragma once
#include <algorithm>
#include <cstdint>

#include "runtime/cl.hpp"
#include "runtime/device.hpp"
#include "runtime/exec_context.hpp"

namespace cldl {

// Work-items per group for such a launch: 1024 on a CPU (PoCL loops over a group's items in one
// vectorised function and pays about a microsecond per group: an Add over 4x128x384 floats took the
// same time as with its own pick, 64 per group took 1.5x), 256 elsewhere; a power of two within the
// kernel's and the device's limits.
// The largest power of two that is at most `lim` (1 for 0).
inline size_t pow2_at_most(size_t lim) {
  size_t g = 1;
  while (g * 2 <= lim) g *= 2;
  return g;
}

inline size_t fixed_group_items(const cl::Kernel& k, const Device& dev) {
  const size_t want = dev.info.type == DeviceType::cpu ? 1024 : 256;
  size_t lim = std::min(want, k.getWorkGroupInfo<CL_KERNEL_WORK_GROUP_SIZE>(dev.device));
  if (dev.info.max_work_group_size) lim = std::min(lim, dev.info.max_work_group_size);
  return pow2_at_most(lim);
}

// The largest power of two that divides n, at most `cap` (n > 0): a work-group width along a dim that
// needs no bounds check on it. A bounds check on the vectorised (innermost) dim can cost a CPU runtime
// its vectorisation: a Gather of 512 rows of 384 floats took 130 us with one, 20 us without.
inline size_t pow2_divisor(int64_t n, size_t cap) {
  size_t g = 1;
  while (g * 2 <= cap && n % int64_t(g * 2) == 0) g *= 2;
  return g;
}

// The smallest power of two >= n, at most `cap`.
inline size_t pow2_cover(int64_t n, size_t cap) {
  size_t g = 1;
  while (g < cap && int64_t(g) < n) g *= 2;
  return g;
}

// The largest power of two within the device's work-item size along `dim` (NVIDIA: 1024, 1024, 64), so a
// group that covers a dim up to a power of two stays launchable there.
inline size_t pow2_work_items(const Device& dev, size_t dim) {
  const auto& sizes = dev.info.max_work_item_sizes;
  return pow2_at_most(dim < sizes.size() ? sizes[dim] : 1);
}

// A launch over (gx, gy, gz) with local (lx, ly, 1): gx and gy padded up to it, gz as it is.
struct FixedLaunch {
  cl::NDRange global, local;
};
inline FixedLaunch fixed_launch(int64_t gx, int64_t gy, int64_t gz, size_t lx, size_t ly) {
  lx = std::max<size_t>(1, lx), ly = std::max<size_t>(1, ly);
  return {cl::NDRange(round_up(size_t(gx), lx), round_up(size_t(gy), ly), size_t(gz)), cl::NDRange(lx, ly, 1)};
}

}  // namespace cldl
