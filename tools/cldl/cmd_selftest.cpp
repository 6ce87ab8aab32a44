// `cldl selftest`: a real computation on the chosen device (GEMM + bias + ReLU) checked against the host.
#include <chrono>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "layers/gemm.hpp"
#include "runtime/cldl.hpp"
#include "tools/cldl/commands.hpp"

namespace cldl::cli {
namespace {

void run_selftest(const std::string& device, int64_t M, int64_t N, int64_t K) {
  auto ctx = Context::create(device);
  const auto& dev = ctx->device(0);
  fmt::print("device: {} [{}] ({})\n", dev.info.name, dev.id(), dev.info.platform_name);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  HostTensor a(DType::f32, {M, K}), b(DType::f32, {K, N}), bias(DType::f32, {N});
  for (auto* t : {&a, &b, &bias})
    for (auto& v : t->span<float>()) v = u(rng);
  GemmConfig cfg;
  cfg.M = M;
  cfg.N = N;
  cfg.K = K;
  cfg.bias = GemmBias::per_col;
  cfg.act = Activation(Act::relu);
  auto t0 = std::chrono::steady_clock::now();
  auto gemm = Gemm::create(*ctx, 0, cfg);
  auto t1 = std::chrono::steady_clock::now();
  Tensor da = ctx->upload(a), db = ctx->upload(b), dbias = ctx->upload(bias);
  Tensor dc = ctx->alloc({M, N}, DType::f32);
  auto ec = ctx->exec();
  gemm->run(da, db, dc, ec, &dbias);
  ec.queue.finish();
  auto t2 = std::chrono::steady_clock::now();
  const int reps = 5;
  for (int r = 0; r < reps; ++r) gemm->run(da, db, dc, ec, &dbias);
  ec.queue.finish();
  auto t3 = std::chrono::steady_clock::now();
  HostTensor c = ctx->download(dc);
  double max_err = 0, max_ref = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias.as<float>()[n];
      for (int64_t k = 0; k < K; ++k) acc += double(a.as<float>()[m * K + k]) * b.as<float>()[k * N + n];
      acc = std::max(acc, 0.0);
      max_err = std::max(max_err, std::fabs(acc - c.as<float>()[m * N + n]));
      max_ref = std::max(max_ref, std::fabs(acc));
    }
  double per_run = std::chrono::duration<double>(t3 - t2).count() / reps;
  bool ok = max_err <= 1e-4 * std::max(1.0, max_ref);
  fmt::print("gemm {}x{}x{} + bias + relu ({}): max abs error {:.2e} vs host double reference -> {}\n", M, N, K,
             gemm->algorithm(), max_err, ok ? "ok" : "MISMATCH");
  fmt::print("program build/load {:.1f} ms, first run {:.1f} ms, then {:.3f} ms per run ({:.2f} GFLOP/s)\n",
             std::chrono::duration<double, std::milli>(t1 - t0).count(),
             std::chrono::duration<double, std::milli>(t2 - t1).count(), per_run * 1e3, cfg.flops() / per_run * 1e-9);
  if (!ok) set_exit_code(1);
}

}  // namespace

void add_selftest_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("selftest", "Run a GEMM on a device and check it against the host");
  static std::string device;
  static int64_t m = 257, n = 129, k = 191;
  cmd->add_option("-d,--device", device, "Device spec (gpu, cpu, accelerator, gpu:1, P:D, name)")->envname("CLDL_DEVICE");
  cmd->add_option("-m", m, "Rows")->check(CLI::PositiveNumber);
  cmd->add_option("-n", n, "Columns")->check(CLI::PositiveNumber);
  cmd->add_option("-k", k, "Inner dimension")->check(CLI::PositiveNumber);
  cmd->callback([] { run_selftest(device, m, n, k); });
}

}  // namespace cldl::cli
