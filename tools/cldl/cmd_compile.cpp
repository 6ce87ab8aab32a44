// `cldl compile [--device D] [--out DIR]`: builds every program the library uses by default for one
// device. With --out, writes an offline bundle (binaries + manifest) that `--binaries DIR` loads.
// `cldl compile model.onnx [--dim N=V ...] --out DIR`: bundles exactly the programs that model asks for
// (recorded while it is compiled and run once on random inputs).
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "runtime/bundle.hpp"
#include "runtime/cldl.hpp"
#include "tools/cldl/commands.hpp"
#include "tools/cldl/model_cli.hpp"

namespace cldl::cli {
namespace {

void progress_line(size_t i, size_t n, std::chrono::steady_clock::time_point t0) {
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double eta = i ? s / i * (n - i) : 0;
  std::fprintf(stderr, "\r  [%zu/%zu] %.1f s elapsed, ~%.0f s left   ", i, n, s, eta);
  if (i == n) std::fputc('\n', stderr);
}

// The programs `model` requests from the program cache while it is compiled and run once.
std::vector<ProgramSpec> model_programs(const std::string& model, const std::string& device,
                                        const std::vector<std::string>& dims, std::shared_ptr<Context>& ctx) {
  ModelOptions mo;
  mo.model = model;
  mo.device = device;
  mo.dims = dims;
  mo.random = true;
  auto& cache = ProgramCache::global();
  cache.start_recording();
  std::vector<ProgramSpec> rec;
  try {
    LoadedModel lm = load_for_cli(mo, false);
    ModelRunner(lm).run();  // programs made at the first run (every stage) are recorded too
    ctx = lm.ctx;
    rec = cache.stop_recording();
  } catch (...) {
    cache.stop_recording();
    throw;
  }
  return rec;
}

void run_compile(const std::string& model, const std::vector<std::string>& dims, const std::string& device,
                 const std::string& out) {
  if (!model.empty() && out.empty()) fail("cldl compile {}: give --out DIR for the model's bundle", model);
  std::shared_ptr<Context> ctx;
  std::vector<ProgramSpec> programs;
  if (!model.empty()) {
    programs = model_programs(model, device, dims, ctx);
    fmt::print("model {} uses {} programs\n", model, programs.size());
  } else {
    if (!dims.empty()) fail("cldl compile: --dim needs a model file");
    ctx = Context::create(device);
    programs = registered_programs(ctx->device().info);
  }
  const auto& dev = ctx->device();
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
  auto* cmd = app.add_subcommand("compile", "Build the library's default programs for a device (warm the cache, or --out a bundle)");
  static std::string model, device, out;
  static std::vector<std::string> dims;
  cmd->add_option("model", model, "ONNX model: bundle only the programs it needs (with --out)");
  cmd->add_option("--dim", dims, "NAME=VALUE for a symbolic input dimension of the model");
  cmd->add_option("-d,--device", device, "Device spec")->envname("CLDL_DEVICE");
  cmd->add_option("-o,--out", out, "Write an offline binary bundle to this folder");
  cmd->callback([] { run_compile(model, dims, device, out); });
}

}  // namespace cldl::cli
