// `cldl profile model.onnx --trace out.json`: one warm-up run, then a run with every kernel, copy and
// transfer recorded (queued / start / end) and written as Chrome trace JSON; prints the slowest nodes.
// --runs N profiles N runs and reports each command's shortest time (and the shortest wall time): on a
// shared machine one run's figures move by tens of percent; the trace is the first run's.
#include <algorithm>
#include <numeric>

#include "runtime/profiler.hpp"
#include "tools/cldl/commands.hpp"
#include "tools/cldl/model_cli.hpp"

namespace cldl::cli {

void add_profile_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("profile", "Profile one run of an ONNX model; write Chrome trace JSON");
  static ModelOptions mo;
  static std::string trace;
  static int top = 15, runs = 1;
  mo.add(cmd);
  cmd->add_option("--trace", trace, "Chrome trace JSON output (Perfetto, chrome://tracing)");
  cmd->add_option("--top", top, "Rows of the per-command table");
  cmd->add_option("--runs", runs, "Profiled runs; each command's time is its minimum over them")
      ->check(CLI::PositiveNumber);
  cmd->callback([] {
    LoadedModel lm = load_for_cli(mo, true);
    ModelRunner session(lm);
    session.run();  // warm-up: programs built, buffers touched
    Profiler prof;
    auto t0 = std::chrono::steady_clock::now();
    session.run(&prof);
    double wall = elapsed_ms(t0);
    auto recs = prof.records();
    // Further runs: each command's minimum (the same commands in the same order every run).
    std::vector<double> best(recs.size());
    for (size_t i = 0; i < recs.size(); ++i) best[i] = recs[i].duration_ms();
    for (int r = 1; r < runs; ++r) {
      Profiler more;
      t0 = std::chrono::steady_clock::now();
      session.run(&more);
      wall = std::min(wall, elapsed_ms(t0));
      const auto again = more.records();
      if (again.size() != recs.size()) fail("profile: run {} made {} commands, the first {}", r + 1, again.size(), recs.size());
      for (size_t i = 0; i < recs.size(); ++i) best[i] = std::min(best[i], again[i].duration_ms());
    }
    double device = 0;
    for (double b : best) device += b;
    fmt::print("{} commands, device time {:.3f} ms, wall {:.3f} ms on {}{}\n", recs.size(), device, wall,
               lm.ctx->device().info.name, runs > 1 ? fmt::format(" (minimum of {} runs each)", runs) : "");
    std::vector<size_t> order(recs.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return best[a] > best[b]; });
    // A model placed over several devices: each command's device and queue (the trace's tracks too).
    auto& nd = lm.model->node_devices();
    bool placed = std::any_of(nd.begin(), nd.end(), [&](int d) { return d != nd.front(); });
    for (size_t i = 0; i < order.size() && int(i) < top; ++i)
      fmt::print("  {:>10.4f} ms  {}{}\n", best[order[i]], recs[order[i]].name,
                 placed ? fmt::format("  [{}]", recs[order[i]].queue) : std::string());
    if (!trace.empty()) {
      prof.write_chrome_trace(trace);
      fmt::print("trace written to {}\n", trace);
    }
  });
}

}  // namespace cldl::cli
