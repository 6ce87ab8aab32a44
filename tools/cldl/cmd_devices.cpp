// `cldl devices`: platforms and devices with the capabilities kernels use; --json for scripts.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/device.hpp"
#include "tools/cldl/commands.hpp"

namespace cldl::cli {
namespace {

std::string mib(uint64_t b) { return b >= (1ull << 30) ? fmt::format("{:.1f} GiB", b / 1073741824.0) : fmt::format("{} KiB", b >> 10); }

nlohmann::json to_json(const Device& d, bool is_default) {
  const auto& i = d.info;
  return {{"id", d.id()},
          {"spec", fmt::format("{}:{}", to_string(i.type), d.type_index)},
          {"default", is_default},
          {"name", i.name},
          {"vendor", i.vendor},
          {"vendor_id", i.vendor_id},
          {"type", std::string(to_string(i.type))},
          {"platform", i.platform_name},
          {"platform_version", i.platform_version},
          {"device_version", i.version},
          {"driver_version", i.driver_version},
          {"opencl_c_version", i.opencl_c_version},
          {"compute_units", i.compute_units},
          {"clock_mhz", i.clock_mhz},
          {"global_mem_bytes", i.global_mem_bytes},
          {"local_mem_bytes", i.local_mem_bytes},
          {"max_alloc_bytes", i.max_alloc_bytes},
          {"max_work_group_size", i.max_work_group_size},
          {"max_work_item_sizes", i.max_work_item_sizes},
          {"preferred_vector_width_float", i.preferred_vector_float},
          {"preferred_vector_width_half", i.preferred_vector_half},
          {"fp16", i.fp16},
          {"fp64", i.fp64},
          {"subgroups", i.subgroups},
          {"quirks", i.quirks.names()}};
}

void run_devices(bool json) {
  const auto& devs = all_devices();
  std::string def_id;
  try {
    def_id = select_device().id();
  } catch (const std::exception&) {
  }
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& d : devs) arr.push_back(to_json(d, d.id() == def_id));
    std::puts(nlohmann::json{{"devices", arr}}.dump(2).c_str());
    return;
  }
  if (devs.empty()) {
    std::puts("No OpenCL devices found. Install an ICD, e.g. `apt-get install pocl-opencl-icd`.");
    set_exit_code(1);
    return;
  }
  int last_platform = -1;
  for (const auto& d : devs) {
    const auto& i = d.info;
    if (d.platform_index != last_platform) {
      fmt::print("Platform {}: {} ({})\n", d.platform_index, i.platform_name, i.platform_version);
      last_platform = d.platform_index;
    }
    fmt::print("  [{}] {}{}  ({}:{})\n", d.id(), i.name, d.id() == def_id ? "  <- default" : "", to_string(i.type),
               d.type_index);
    fmt::print("      vendor {} (0x{:x}), driver {}, {}\n", i.vendor, i.vendor_id, i.driver_version, i.opencl_c_version);
    fmt::print("      {} compute units @ {} MHz, global {} (max alloc {}), local {}{}\n", i.compute_units, i.clock_mhz,
               mib(i.global_mem_bytes), mib(i.max_alloc_bytes), mib(i.local_mem_bytes),
               i.local_mem_is_dedicated ? " dedicated" : "");
    fmt::print("      max work-group {}, preferred float vector {}, fp16 {}, fp64 {}, subgroups {}\n",
               i.max_work_group_size, i.preferred_vector_float, i.fp16 ? "yes" : "no", i.fp64 ? "yes" : "no",
               i.subgroups ? "yes" : "no");
    auto q = i.quirks.names();
    if (!q.empty()) fmt::print("      quirks: {}\n", fmt::join(q, ", "));
  }
}

}  // namespace

void add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List OpenCL platforms and devices with their capabilities");
  static bool json = false;
  cmd->add_flag("--json", json, "Print JSON instead of a table");
  cmd->callback([] { run_devices(json); });
}

}  // namespace cldl::cli
