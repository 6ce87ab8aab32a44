// Program builds cached in memory and on disk, keyed by source, options, device, driver, platform and
// library version; also loads programs from offline-built binaries (the FPGA flow).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/cl.hpp"
#include "runtime/device.hpp"

namespace cldl {

using VariantFilter = bool (*)(const DeviceInfo&);
struct ProgramSpec {
  std::string file;  // a kernels/ file, or the name of a generated program
  std::string options;
  VariantFilter for_device = nullptr;
  std::string source = {};  // a generated program's full source (empty: the kernel file's)
  bool applies_to(const DeviceInfo& info) const { return !for_device || for_device(info); }
};
struct ProgramCacheStats {
  uint64_t memory_hits = 0;   // served from this process's map
  uint64_t disk_hits = 0;     // loaded from a cached binary
  uint64_t builds = 0;        // compiled from source
  uint64_t binary_loads = 0;  // loaded from offline binary bundles / files
  uint64_t disk_rejects = 0;  // unreadable or stale files that were rebuilt
};

class ProgramCache {
 public:
  // The process-wide cache used by every op. Directory from CLDL_CACHE_DIR, else
  // $XDG_CACHE_HOME/cldl, else $HOME/.cache/cldl; CLDL_CACHE=0 turns the disk cache off.
  static ProgramCache& global();
  explicit ProgramCache(std::string directory, bool disk_enabled = true);

  // Program built from kernels/common.cl + kernels/<kernel_file> with `options` for `device`.
  cl::Program get(const cl::Context& ctx, const Device& device, std::string_view kernel_file,
                  std::string_view options = {});
  // Same for explicit source text; `name` appears in errors and logs.
  cl::Program get_source(const cl::Context& ctx, const Device& device, std::string_view name,
                         const std::string& source, std::string_view options = {});
  // get_source with the source's hash already known (get() knows an embedded file's).
  cl::Program get_hashed(const cl::Context& ctx, const Device& device, std::string_view name,
                         const std::string& source, std::string_view source_hash, std::string_view options);
  // Program from a binary file built offline for `device` (no source is compiled).
  cl::Program load_binary_file(const cl::Context& ctx, const Device& device, const std::string& path,
                               std::string_view options = {});

  // Offline bundle: when set, get() looks for <dir>/<key hash>.bin first and, if `strict`, refuses to
  // compile from source when it is missing.
  void set_binary_bundle(std::string dir, bool strict);
  // The disk key hash that get() uses for this program (for bundle writers).
  std::string key_hash(const Device& device, std::string_view kernel_file, std::string_view options) const;
  // The full disk key (what a cache or bundle entry records and checks).
  std::string disk_key_for(const Device& device, std::string_view kernel_file, std::string_view options) const;
  // The same for a spec, generated source included.
  std::string disk_key_for(const Device& device, const ProgramSpec& spec) const;
  // Writes the program's binary for `device` to `path` atomically.
  static void save_binary(const cl::Program& p, const cl::Device& d, const std::string& path,
                          const std::string& key);

  ProgramCacheStats stats() const;
  // Programs compiled from source by this cache object so far (stats().builds).
  uint64_t source_builds() const { return builds_.load(); }
  // Recording: while on, every get() (kernel file + options, memory hits included) and get_source()
  // (generated source, e.g. fused element-wise kernels) is remembered in request order without
  // duplicates; `cldl compile model.onnx` bundles exactly what a model asks for.
  void start_recording();
  std::vector<ProgramSpec> stop_recording();
  // True while recording for a bundle or using a strict bundle: every device program must come from
  // this cache, so ops avoid libraries that compile their own kernels at run time (CLBlast).
  bool binaries_only() const;
  void clear_memory();
  const std::string& directory() const { return dir_; }
  bool disk_enabled() const { return disk_; }
  void set_disk_enabled(bool on) { disk_ = on; }

 private:
  void record(ProgramSpec spec);  // with m_ held
  cl::Program build(const cl::Context& ctx, const Device& device, std::string_view name, const std::string& source,
                    std::string_view options, const std::string& key, const std::string& hash);
  std::string dir_;
  std::atomic<bool> disk_;
  std::string bundle_dir_;
  bool bundle_strict_ = false;
  mutable std::mutex m_;
  std::map<std::string, std::shared_future<cl::Program>> mem_;
  bool recording_ = false;
  std::vector<ProgramSpec> recorded_;
  std::atomic<uint64_t> memory_hits_{0}, disk_hits_{0}, builds_{0}, binary_loads_{0}, disk_rejects_{0};
};

// Program variants the library builds by default (kernel file + options), registered by each op family
// with a static ProgramVariants object; `cldl compile` builds those of its device.
// A variant's device filter (nullptr: every device) says where the op's create() can pick it, e.g. the
// float16-wide RNN tiles only where the device prefers float16: elsewhere building it is wasted time
// (Intel's FPGA emulator took minutes over it).
std::vector<ProgramSpec> registered_programs();                        // every variant
std::vector<ProgramSpec> registered_programs(const DeviceInfo& info);  // those for this device
struct ProgramVariants {
  ProgramVariants(std::string file, std::vector<std::string> option_sets, VariantFilter for_device = nullptr);
};

// Kernel `name` from `program`; throws Error naming the kernel when it is missing.
cl::Kernel make_kernel(const cl::Program& program, const char* name);

// Stable 64-bit FNV-1a hash as 16 hex digits (the cache file name).
std::string hash_hex(std::string_view data);

// Library version string compiled into the cache key.
std::string_view library_version();

}  // namespace cldl
