// `cldl compile [--device D] [--out DIR]`: builds every program the library uses by default for one
// device. With --out, writes an offline bundle (binaries + manifest) that `--binaries DIR` loads.
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "runtime/bundle.hpp"
#include "runtime/cldl.hpp"
#include "tools/cldl/commands.hpp"

namespace cldl::cli {
namespace {

void progress_line(size_t i, size_t n, std::chrono::steady_clock::time_point t0) {
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double eta = i ? s / i * (n - i) : 0;
  std::fprintf(stderr, "\r  [%zu/%zu] %.1f s elapsed, ~%.0f s left   ", i, n, s, eta);
  if (i == n) std::fputc('\n', stderr);
}

void run_compile(const std::string& device, const std::string& out) {
  auto ctx = Context::create(device);
  const auto& dev = ctx->device();
  auto programs = registered_programs();
  fmt::print("compiling {} programs for {} ({}, driver {})\n", programs.size(), dev.info.name, dev.info.platform_name,
             dev.info.driver_version);
  auto t0 = std::chrono::steady_clock::now();
  auto progress = [t0](size_t i, size_t n) { progress_line(i, n, t0); };
  if (!out.empty()) {
    auto entries = write_bundle(*ctx, 0, programs, out, progress);
    fmt::print("wrote {} binaries and manifest.json to {}\n", entries.size(), out);
  } else {
    for (size_t i = 0; i < programs.size(); ++i) {
      ctx->program(programs[i].file, programs[i].options);
      progress(i + 1, programs.size());
    }
    auto st = ProgramCache::global().stats();
    fmt::print("built {} from source, {} from the disk cache ({})\n", st.builds, st.disk_hits,
               ProgramCache::global().disk_enabled() ? ProgramCache::global().directory() : "disk cache off");
  }
  fmt::print("took {:.2f} s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

void add_compile_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("compile", "Build every library program for a device (warm the cache, or --out a bundle)");
  static std::string device, out;
  cmd->add_option("-d,--device", device, "Device spec")->envname("CLDL_DEVICE");
  cmd->add_option("-o,--out", out, "Write an offline binary bundle to this folder");
  cmd->callback([] { run_compile(device, out); });
}

}  // namespace cldl::cli
