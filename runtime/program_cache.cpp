// ProgramCache: in-memory map of shared futures (one build per key even under threads) over an
// on-disk binary store with atomic writes and self-describing entries.
#include "runtime/program_cache.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "runtime/error.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/log.hpp"

namespace fs = std::filesystem;

namespace cldl {

#ifndef CLDL_VERSION
#define CLDL_VERSION "dev"
#endif
std::string_view library_version() { return CLDL_VERSION; }

namespace {
constexpr char kMagic[8] = {'C', 'L', 'D', 'L', 'B', 'I', 'N', '1'};

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string default_dir() {
  if (const char* d = std::getenv("CLDL_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/cldl";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/cldl";
  return (fs::temp_directory_path() / "cldl-cache").string();
}

bool env_disk_enabled() {
  const char* c = std::getenv("CLDL_CACHE");
  return !(c && (std::string(c) == "0" || std::string(c) == "off"));
}

std::string full_source(std::string_view kernel_file) {
  if (kernel_file == "common.cl") return kernel_source("common.cl");
  return kernel_source("common.cl") + "\n#line 1\n" + kernel_source(kernel_file);
}

// The source text and its hash. An embedded kernel file's are computed once per process (every op
// creation asks for its program, and hashing tens of KB each time was a third of a plan's host time);
// with CLDL_KERNEL_DIR the files may change between calls, so they are read and hashed each time.
struct SourceText {
  std::string text, hash;
};
std::shared_ptr<const SourceText> source_of(std::string_view kernel_file) {
  auto make = [&] {
    std::string text = full_source(kernel_file);
    std::string hash = hash_hex(text);
    return std::make_shared<const SourceText>(SourceText{std::move(text), std::move(hash)});
  };
  if (const char* dir = std::getenv("CLDL_KERNEL_DIR"); dir && *dir) return make();
  static std::mutex m;
  static std::map<std::string, std::shared_ptr<const SourceText>, std::less<>> memo;
  std::lock_guard lock(m);
  auto it = memo.find(kernel_file);
  if (it == memo.end()) it = memo.emplace(std::string(kernel_file), make()).first;
  return it->second;
}

// The full disk key: everything a binary depends on except the context.
std::string disk_key(const Device& d, std::string_view name, size_t source_size, std::string_view source_hash,
                     std::string_view options) {
  return fmt::format("cldl {}|{}|{}|{}|{}|{}|{}|src {} {}", library_version(), d.info.platform_name,
                     d.info.platform_version, d.info.name, d.info.driver_version, name, options, source_size,
                     source_hash);
}

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Reads an entry; returns false when the file is missing, truncated, corrupt or for another key.
bool read_entry(const std::string& path, const std::string& key, std::vector<unsigned char>& binary, bool& existed) {
  std::ifstream f(path, std::ios::binary);
  existed = static_cast<bool>(f);
  if (!f) return false;
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (pos + n > data.size()) return false;
    std::memcpy(dst, data.data() + pos, n);
    pos += n;
    return true;
  };
  char magic[8];
  uint64_t klen = 0, blen = 0, sum = 0;
  if (!take(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return false;
  if (!take(&klen, 8) || klen != key.size() || pos + klen > data.size()) return false;
  if (data.compare(pos, klen, key) != 0) return false;
  pos += klen;
  if (!take(&blen, 8) || blen == 0 || pos + blen + 8 != data.size()) return false;
  binary.assign(data.begin() + pos, data.begin() + pos + blen);
  pos += blen;
  if (!take(&sum, 8)) return false;
  return sum == fnv1a(std::string_view(reinterpret_cast<const char*>(binary.data()), binary.size()));
}

void write_atomic(const std::string& path, const std::string& bytes) {
  fs::path p(path);
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  std::random_device rd;
  std::string tmp = fmt::format("{}.tmp.{:x}", path, (uint64_t(rd()) << 32) ^ rd());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("cannot write program cache file '{}'", tmp);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) fail("writing program cache file '{}' failed", tmp);
  }
  fs::rename(tmp, p, ec);  // atomic on POSIX: readers see the old file or the new one, never half
  if (ec) {
    fs::remove(tmp, ec);
    fail("cannot rename program cache file into '{}'", path);
  }
}

std::string build_log(const cl::Program& p, const cl::Device& d) {
  std::string log;
  p.getBuildInfo(d, CL_PROGRAM_BUILD_LOG, &log);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}
}  // namespace

std::string hash_hex(std::string_view data) { return fmt::format("{:016x}", fnv1a(data)); }

ProgramCache& ProgramCache::global() {
  static ProgramCache cache(default_dir(), env_disk_enabled());
  return cache;
}

ProgramCache::ProgramCache(std::string directory, bool disk_enabled) : dir_(std::move(directory)), disk_(disk_enabled) {}

ProgramCacheStats ProgramCache::stats() const {
  return {memory_hits_.load(), disk_hits_.load(), builds_.load(), binary_loads_.load(), disk_rejects_.load()};
}

void ProgramCache::clear_memory() {
  std::lock_guard lock(m_);
  mem_.clear();
}

void ProgramCache::set_binary_bundle(std::string dir, bool strict) {
  std::lock_guard lock(m_);
  bundle_dir_ = std::move(dir);
  bundle_strict_ = strict;
}

std::string ProgramCache::key_hash(const Device& device, std::string_view kernel_file, std::string_view options) const {
  auto src = source_of(kernel_file);
  return hash_hex(disk_key(device, kernel_file, src->text.size(), src->hash, options));
}

std::string ProgramCache::disk_key_for(const Device& device, std::string_view kernel_file,
                                      std::string_view options) const {
  auto src = source_of(kernel_file);
  return disk_key(device, kernel_file, src->text.size(), src->hash, options);
}

std::string ProgramCache::disk_key_for(const Device& device, const ProgramSpec& spec) const {
  if (spec.source.empty()) return disk_key_for(device, spec.file, spec.options);
  return disk_key(device, spec.file, spec.source.size(), hash_hex(spec.source), spec.options);
}

void ProgramCache::start_recording() {
  std::lock_guard lock(m_);
  recording_ = true;
  recorded_.clear();
}

std::vector<ProgramSpec> ProgramCache::stop_recording() {
  std::lock_guard lock(m_);
  recording_ = false;
  return std::exchange(recorded_, {});
}

bool ProgramCache::binaries_only() const {
  std::lock_guard lock(m_);
  return recording_ || (!bundle_dir_.empty() && bundle_strict_);
}

cl::Program ProgramCache::get(const cl::Context& ctx, const Device& device, std::string_view kernel_file,
                              std::string_view options) {
  {
    std::lock_guard lock(m_);
    if (recording_) record(ProgramSpec{std::string(kernel_file), std::string(options)});
  }
  auto src = source_of(kernel_file);
  return get_hashed(ctx, device, kernel_file, src->text, src->hash, options);
}

void ProgramCache::record(ProgramSpec spec) {
  for (auto& r : recorded_)
    if (r.file == spec.file && r.options == spec.options && r.source == spec.source) return;
  recorded_.push_back(std::move(spec));
}

cl::Program ProgramCache::get_source(const cl::Context& ctx, const Device& device, std::string_view name,
                                     const std::string& source, std::string_view options) {
  {
    std::lock_guard lock(m_);
    if (recording_) record(ProgramSpec{std::string(name), std::string(options), nullptr, source});
  }
  return get_hashed(ctx, device, name, source, hash_hex(source), options);
}

cl::Program ProgramCache::get_hashed(const cl::Context& ctx, const Device& device, std::string_view name,
                                     const std::string& source, std::string_view source_hash,
                                     std::string_view options) {
  std::string key = disk_key(device, name, source.size(), source_hash, options);
  // What tells programs apart first (the source hash, the options): the map compares keys from the front,
  // and the disk key's long common prefix made every lookup a memcmp of it.
  std::string mem_key = fmt::format("{}|{}|{}|{}|{}", source_hash, options, static_cast<const void*>(ctx()),
                                    static_cast<const void*>(device.device()), key);
  std::promise<cl::Program> promise;
  std::shared_future<cl::Program> fut;
  bool owner = false;
  {
    std::lock_guard lock(m_);
    auto it = mem_.find(mem_key);
    if (it != mem_.end()) {
      fut = it->second;
    } else {
      fut = promise.get_future().share();
      mem_.emplace(mem_key, fut);
      owner = true;
    }
  }
  if (!owner) {
    memory_hits_++;
    return fut.get();  // rethrows the builder's error
  }
  try {
    cl::Program p = build(ctx, device, name, source, options, key, hash_hex(key));
    promise.set_value(p);
    return p;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard lock(m_);
    mem_.erase(mem_key);  // a later call may try again (e.g. after fixing CLDL_KERNEL_DIR)
    throw;
  }
}

namespace {
cl::Program from_binary(const cl::Context& ctx, const Device& device, const std::vector<unsigned char>& bin,
                        std::string_view options, std::string_view what, bool throw_on_error) {
  cl::Program::Binaries bins{bin};
  std::vector<cl_int> status;
  cl_int err = CL_SUCCESS;
  cl::Program p(ctx, {device.device}, bins, &status, &err);
  if (err == CL_SUCCESS) err = p.build({device.device}, std::string(options).c_str());
  if (err != CL_SUCCESS) {
    if (throw_on_error)
      throw Error(fmt::format("loading program binary {} for {} failed: {} ({})\n{}", what, device.info.name,
                              cl_error_name(err), err, p() ? build_log(p, device.device) : std::string()),
                  err, "clCreateProgramWithBinary");
    return {};
  }
  return p;
}
}  // namespace

cl::Program ProgramCache::build(const cl::Context& ctx, const Device& device, std::string_view name,
                                const std::string& source, std::string_view options, const std::string& key,
                                const std::string& hash) {
  std::string bundle;
  bool strict = false;
  {
    std::lock_guard lock(m_);
    bundle = bundle_dir_;
    strict = bundle_strict_;
  }
  if (!bundle.empty()) {
    std::vector<unsigned char> bin;
    bool existed = false;
    std::string path = bundle + "/" + hash + ".bin";
    if (read_entry(path, key, bin, existed)) {
      if (auto p = from_binary(ctx, device, bin, options, path, true); p()) {
        binary_loads_++;
        return p;
      }
    }
    if (strict)
      fail("program {} (options '{}') for {} is not in the binary bundle {}{}", name, options, device.info.name,
           bundle, existed ? " (the entry there is for another device, driver or library version)"
                           : "; a model's bundle holds what it used at the --dim values given to `cldl compile`");
  }
  std::string path = dir_ + "/" + hash + ".bin";
  if (disk_) {
    std::vector<unsigned char> bin;
    bool existed = false;
    if (read_entry(path, key, bin, existed)) {
      if (auto p = from_binary(ctx, device, bin, options, path, false); p()) {
        disk_hits_++;
        log::debug("program {} '{}': disk cache hit {}", name, options, path);
        return p;
      }
    }
    if (existed) {
      disk_rejects_++;
      log::debug("program cache entry {} unreadable or stale; rebuilding", path);
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  cl::Program p(ctx, source);
  cl_int err = p.build({device.device}, std::string(options).c_str());
  if (err != CL_SUCCESS) {
    std::string log = build_log(p, device.device);
    throw Error(fmt::format("building kernel file {} with options '{}' for {} failed: {} ({})\nbuild log:\n{}", name,
                            options, device.info.name, cl_error_name(err), err, log),
                err, "clBuildProgram");
  }
  builds_++;
  log::debug("program {} '{}': built in {:.0f} ms", name, options,
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  // A successful build's log (warnings, remarks) is for debugging only; failures carry it in the error.
  if (log::level() >= log::Level::debug)
    if (std::string blog = build_log(p, device.device); !blog.empty())
      log::debug("program {} '{}' build log:\n{}", name, options, blog);
  if (disk_) {
    try {
      save_binary(p, device.device, path, key);
    } catch (const Error& e) {
      log::warn("program cache: {}", e.what());  // the program still works; only the cache is lost
    }
  }
  return p;
}

void ProgramCache::save_binary(const cl::Program& p, const cl::Device& d, const std::string& path,
                               const std::string& key) {
  std::vector<cl::Device> devs;
  p.getInfo(CL_PROGRAM_DEVICES, &devs);
  std::vector<size_t> sizes;
  check(p.getInfo(CL_PROGRAM_BINARY_SIZES, &sizes), "clGetProgramInfo", "CL_PROGRAM_BINARY_SIZES");
  cl::Program::Binaries bins;
  check(p.getInfo(CL_PROGRAM_BINARIES, &bins), "clGetProgramInfo", "CL_PROGRAM_BINARIES");
  for (size_t i = 0; i < devs.size() && i < bins.size(); ++i) {
    if (devs[i]() != d()) continue;
    const auto& bin = bins[i];
    if (bin.empty()) fail("the driver returned an empty binary for {}", path);
    std::string out(kMagic, 8);
    put(out, uint64_t(key.size()));
    out += key;
    put(out, uint64_t(bin.size()));
    out.append(reinterpret_cast<const char*>(bin.data()), bin.size());
    put(out, fnv1a(std::string_view(reinterpret_cast<const char*>(bin.data()), bin.size())));
    write_atomic(path, out);
    return;
  }
  fail("program has no binary for the requested device ({})", path);
}

cl::Program ProgramCache::load_binary_file(const cl::Context& ctx, const Device& device, const std::string& path,
                                           std::string_view options) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot open program binary '{}'", path);
  std::vector<unsigned char> bin((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bin.empty()) fail("program binary '{}' is empty", path);
  auto p = from_binary(ctx, device, bin, options, path, true);
  binary_loads_++;
  return p;
}

namespace {
std::vector<ProgramSpec>& registry() {
  static std::vector<ProgramSpec> r;
  return r;
}
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

ProgramVariants::ProgramVariants(std::string file, std::vector<std::string> option_sets, VariantFilter for_device) {
  std::lock_guard lock(registry_mutex());
  for (auto& o : option_sets) registry().push_back({file, std::move(o), for_device});
}

std::vector<ProgramSpec> registered_programs() {
  std::lock_guard lock(registry_mutex());
  return registry();
}

std::vector<ProgramSpec> registered_programs(const DeviceInfo& info) {
  std::vector<ProgramSpec> r = registered_programs();
  std::erase_if(r, [&](const ProgramSpec& p) { return !p.applies_to(info); });
  return r;
}

cl::Kernel make_kernel(const cl::Program& program, const char* name) {
  cl_int err = CL_SUCCESS;
  cl::Kernel k(program, name, &err);
  check(err, "clCreateKernel", name);
  return k;
}

}  // namespace cldl
