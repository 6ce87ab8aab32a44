// Platform/device enumeration, DeviceInfo queries, the quirks table, and spec parsing.
#include "runtime/device.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>

#include "runtime/error.hpp"
#include "runtime/log.hpp"
#include "runtime/tensor.hpp"

namespace cldl {

std::string_view to_string(DeviceType t) {
  switch (t) {
    case DeviceType::gpu: return "gpu";
    case DeviceType::cpu: return "cpu";
    case DeviceType::accelerator: return "accelerator";
    default: return "other";
  }
}

std::vector<std::string> Quirks::names() const {
  std::vector<std::string> n;
  if (prefers_wide_vectors) n.push_back("prefers_wide_vectors");
  return n;
}

bool DeviceInfo::has_extension(std::string_view ext) const {
  size_t pos = 0;
  while ((pos = extensions.find(ext, pos)) != std::string::npos) {
    size_t end = pos + ext.size();
    bool left_ok = pos == 0 || extensions[pos - 1] == ' ';
    bool right_ok = end == extensions.size() || extensions[end] == ' ';
    if (left_ok && right_ok) return true;
    pos = end;
  }
  return false;
}

std::string Device::id() const { return fmt::format("{}:{}", platform_index, device_index); }

namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return std::tolower(c); });
  return r;
}

template <typename T>
T info_or(const cl::Device& d, cl_device_info what, T fallback) {
  T v{};
  return d.getInfo(what, &v) == CL_SUCCESS ? v : fallback;
}

std::string info_str(const cl::Device& d, cl_device_info what) {
  std::string s;
  if (d.getInfo(what, &s) != CL_SUCCESS) return {};
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

// The one quirks table. Each entry says why; tests/test_platforms.cpp checks each against the driver.
// Not quirks (handled for every driver): a profiling event whose CL_PROFILING_COMMAND_QUEUED is 0 (the
// Profiler falls back to the start time), and a blocking clEnqueueWriteBuffer that returns before the
// write is done (allowed by OpenCL 1.2 5.2.2, seen on Intel's FPGA emulator; Context::upload waits for
// the write's event).
void apply_quirks(DeviceInfo& i) {
  std::string plat = lower(i.platform_name);
  if (i.type == DeviceType::cpu && plat.find("portable computing language") != std::string::npos) {
    // PoCL 3.x auto-vectorises to 256 bits at best; explicit float8/float16 code is what makes its
    // CPU device fast (see kernels/gemm.cl: the own GEMM's NR columns are one vector).
    i.quirks.prefers_wide_vectors = true;
  }
  if (i.type == DeviceType::cpu && plat.find("intel") != std::string::npos) {
    // Intel's CPU runtime vectorises across work-items, but explicit vectors still help GEMM tiles.
    i.quirks.prefers_wide_vectors = true;
  }
}

}  // namespace

bool supports_dtype(const DeviceInfo& info, DType t) { return t != DType::f64 || info.fp64; }

void check_dtype_support(const Device& d, DType t, std::string_view op) {
  if (!supports_dtype(d.info, t))
    throw Error(fmt::format("{}: dtype {} needs a device with double precision (cl_khr_fp64); '{}' has none", op,
                            to_string(t), d.info.name),
                0, std::string(op));
}

namespace {
std::vector<Device> enumerate() {
  std::vector<Device> out;
  std::vector<cl::Platform> platforms;
  cl_int err = cl::Platform::get(&platforms);
  if (err == CL_PLATFORM_NOT_FOUND_KHR || platforms.empty()) {
    log::warn("no OpenCL platform found (is an ICD such as pocl-opencl-icd installed?)");
    return out;
  }
  check(err, "clGetPlatformIDs");
  int counts[4] = {0, 0, 0, 0};
  for (size_t p = 0; p < platforms.size(); ++p) {
    std::vector<cl::Device> devs;
    if (platforms[p].getDevices(CL_DEVICE_TYPE_ALL, &devs) != CL_SUCCESS) {
      log::warn("platform {} lists no devices; skipped", p);
      continue;
    }
    for (size_t d = 0; d < devs.size(); ++d) {
      Device dev;
      dev.platform = platforms[p];
      dev.device = devs[d];
      dev.info = query_device_info(platforms[p], devs[d]);
      dev.platform_index = static_cast<int>(p);
      dev.device_index = static_cast<int>(d);
      dev.type_index = counts[static_cast<int>(dev.info.type)]++;
      out.push_back(std::move(dev));
    }
  }
  return out;
}

std::string device_list(const std::vector<Device>& devs) {
  if (devs.empty()) return "no OpenCL devices present";
  std::string s = "devices present:";
  for (const auto& d : devs)
    s += fmt::format(" [{} {}:{} '{}']", d.id(), to_string(d.info.type), d.type_index, d.info.name);
  return s;
}

bool parse_int(std::string_view s, int& v) {
  if (s.empty() || s.size() > 6) return false;
  v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  return true;
}

std::vector<Device> match(std::string_view raw) {
  const auto& devs = all_devices();
  std::string spec = lower(raw);
  while (!spec.empty() && spec.back() == ' ') spec.pop_back();
  std::vector<Device> hits;
  if (spec.empty()) {
    for (DeviceType t : {DeviceType::gpu, DeviceType::accelerator, DeviceType::cpu, DeviceType::other})
      for (const auto& d : devs)
        if (d.info.type == t) return {d};
    return {};
  }
  if (spec == "all") return devs;
  std::string kind = spec, index;
  if (auto c = spec.find(':'); c != std::string::npos) {
    kind = spec.substr(0, c);
    index = spec.substr(c + 1);
  }
  int a = 0, b = 0;
  if (parse_int(kind, a) && parse_int(index, b)) {
    for (const auto& d : devs)
      if (d.platform_index == a && d.device_index == b) return {d};
    return {};
  }
  static const std::pair<const char*, DeviceType> kinds[] = {
      {"gpu", DeviceType::gpu}, {"cpu", DeviceType::cpu}, {"accelerator", DeviceType::accelerator},
      {"acc", DeviceType::accelerator}, {"fpga", DeviceType::accelerator}};
  for (auto [name, type] : kinds) {
    if (kind != name) continue;
    int want = 0;
    bool all = index == "all";
    if (!index.empty() && !all && !parse_int(index, want)) return {};
    for (const auto& d : devs)
      if (d.info.type == type && (all || d.type_index == want)) hits.push_back(d);
    return hits;
  }
  for (const auto& d : devs)
    if (lower(d.info.name).find(spec) != std::string::npos) hits.push_back(d);
  if (hits.size() > 1) hits.resize(1);  // the first match, in enumeration order
  return hits;
}

}  // namespace

DeviceInfo query_device_info(const cl::Platform& p, const cl::Device& d) {
  DeviceInfo i;
  i.name = info_str(d, CL_DEVICE_NAME);
  i.vendor = info_str(d, CL_DEVICE_VENDOR);
  i.version = info_str(d, CL_DEVICE_VERSION);
  i.driver_version = info_str(d, CL_DRIVER_VERSION);
  i.opencl_c_version = info_str(d, CL_DEVICE_OPENCL_C_VERSION);
  p.getInfo(CL_PLATFORM_NAME, &i.platform_name);
  p.getInfo(CL_PLATFORM_VENDOR, &i.platform_vendor);
  p.getInfo(CL_PLATFORM_VERSION, &i.platform_version);
  for (auto* s : {&i.platform_name, &i.platform_vendor, &i.platform_version})
    while (!s->empty() && s->back() == '\0') s->pop_back();
  auto t = info_or<cl_device_type>(d, CL_DEVICE_TYPE, 0);
  i.type = (t & CL_DEVICE_TYPE_GPU)           ? DeviceType::gpu
           : (t & CL_DEVICE_TYPE_ACCELERATOR) ? DeviceType::accelerator
           : (t & CL_DEVICE_TYPE_CPU)         ? DeviceType::cpu
                                              : DeviceType::other;
  i.vendor_id = info_or<cl_uint>(d, CL_DEVICE_VENDOR_ID, 0);
  i.compute_units = info_or<cl_uint>(d, CL_DEVICE_MAX_COMPUTE_UNITS, 1);
  i.clock_mhz = info_or<cl_uint>(d, CL_DEVICE_MAX_CLOCK_FREQUENCY, 0);
  i.global_mem_bytes = info_or<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE, 0);
  i.local_mem_bytes = info_or<cl_ulong>(d, CL_DEVICE_LOCAL_MEM_SIZE, 0);
  i.max_alloc_bytes = info_or<cl_ulong>(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, 0);
  i.constant_mem_bytes = info_or<cl_ulong>(d, CL_DEVICE_MAX_CONSTANT_BUFFER_SIZE, 0);
  i.global_mem_cache_bytes = info_or<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, 0);
  i.max_work_group_size = info_or<size_t>(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, 1);
  i.max_work_item_sizes = info_or<std::vector<size_t>>(d, CL_DEVICE_MAX_WORK_ITEM_SIZES, {1, 1, 1});
  i.mem_base_addr_align_bits = info_or<cl_uint>(d, CL_DEVICE_MEM_BASE_ADDR_ALIGN, 0);
  i.preferred_vector_float = info_or<cl_uint>(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, 1);
  i.preferred_vector_half = info_or<cl_uint>(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_HALF, 0);
  i.native_vector_float = info_or<cl_uint>(d, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, 1);
  i.local_mem_is_dedicated = info_or<cl_device_local_mem_type>(d, CL_DEVICE_LOCAL_MEM_TYPE, CL_GLOBAL) == CL_LOCAL;
  i.extensions = info_str(d, CL_DEVICE_EXTENSIONS);
  i.fp16 = i.has_extension("cl_khr_fp16");
  i.fp64 = i.has_extension("cl_khr_fp64");
  i.subgroups = i.has_extension("cl_khr_subgroups") || i.has_extension("cl_intel_subgroups");
  // "OpenCL C 1.2 <vendor text>"
  if (std::sscanf(i.opencl_c_version.c_str(), "OpenCL C %d.%d", &i.opencl_c_major, &i.opencl_c_minor) != 2) {
    i.opencl_c_major = 1;
    i.opencl_c_minor = 2;
  }
  apply_quirks(i);
  return i;
}

const std::vector<Device>& all_devices() {
  static std::once_flag once;
  static std::vector<Device> devs;
  std::call_once(once, [] { devs = enumerate(); });
  return devs;
}

Device select_device(std::string_view spec) {
  std::string s(spec);
  if (s.empty()) {
    if (const char* env = std::getenv("CLDL_DEVICE"); env && *env) s = env;
  }
  auto hits = match(s);
  if (hits.empty())
    fail("no OpenCL device matches '{}' (specs: gpu, cpu, accelerator, gpu:1, P:D, or part of a name); {}",
         s.empty() ? "<default>" : s, device_list(all_devices()));
  return hits.front();
}

std::vector<Device> select_devices(std::string_view spec) {
  std::vector<Device> out;
  std::string s(spec);
  if (s.empty()) return {select_device(s)};
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto hits = match(part);
    if (hits.empty())
      fail("no OpenCL device matches '{}' in '{}'; {}", part, s, device_list(all_devices()));
    for (auto& h : hits) out.push_back(h);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace cldl
