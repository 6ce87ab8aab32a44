// Device discovery over every OpenCL platform, the selection spec, and what kernels need to know.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/cl.hpp"

namespace cldl {

enum class DeviceType { gpu, cpu, accelerator, other };
std::string_view to_string(DeviceType t);

// Known driver differences; each flag is set in one table in device.cpp with a comment saying why, is
// read where it changes what cldl does, and has a test in tests/test_platforms.cpp.
struct Quirks {
  bool prefers_wide_vectors = false;  // explicit float8/float16 beat scalar code (CPU drivers): GEMM's NR
  std::vector<std::string> names() const;
};

struct DeviceInfo {
  std::string name, vendor, version, driver_version, opencl_c_version;
  std::string platform_name, platform_vendor, platform_version;
  DeviceType type = DeviceType::other;
  uint32_t vendor_id = 0;
  uint32_t compute_units = 0, clock_mhz = 0;
  uint64_t global_mem_bytes = 0, local_mem_bytes = 0, max_alloc_bytes = 0, constant_mem_bytes = 0;
  uint64_t global_mem_cache_bytes = 0;  // CL_DEVICE_GLOBAL_MEM_CACHE_SIZE (PoCL: the last-level cache)
  size_t max_work_group_size = 0;
  std::vector<size_t> max_work_item_sizes;
  uint32_t mem_base_addr_align_bits = 0;
  uint32_t preferred_vector_float = 1, preferred_vector_half = 0, native_vector_float = 1;
  bool fp16 = false, fp64 = false, subgroups = false, local_mem_is_dedicated = false;
  int opencl_c_major = 1, opencl_c_minor = 2;
  std::string extensions;
  Quirks quirks;
  bool has_extension(std::string_view ext) const;
};

struct Device {
  cl::Platform platform;
  cl::Device device;
  DeviceInfo info;
  int platform_index = 0;  // position among platforms
  int device_index = 0;    // position within its platform
  int type_index = 0;      // position among devices of its type across platforms (for "gpu:1")
  std::string id() const;  // "P:D"
};

// Every device of every platform the ICD loader sees, in platform then device order.
const std::vector<Device>& all_devices();

// Picks a device by spec: "" (then CLDL_DEVICE, then GPU > accelerator > CPU), "gpu", "cpu",
// "accelerator", "gpu:1", "P:D", or a case-insensitive substring of the device name.
// Throws Error listing the devices present when nothing matches.
Device select_device(std::string_view spec = {});
// A comma-separated list of specs ("cpu:0,cpu:1"), or "all" / "cpu:all" for every device of a kind.
std::vector<Device> select_devices(std::string_view spec);

DeviceInfo query_device_info(const cl::Platform& p, const cl::Device& d);

// Whether kernels can compute in `t` on the device: f64 needs cl_khr_fp64 (f16 and bf16 are converted
// with core vload_half / bit shifts and need nothing). Throws an Error naming `op`, the dtype and the
// device when it cannot.
enum class DType : uint8_t;
bool supports_dtype(const DeviceInfo& info, DType t);
void check_dtype_support(const Device& d, DType t, std::string_view op);

}  // namespace cldl
