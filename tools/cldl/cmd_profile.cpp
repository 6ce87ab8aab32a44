// `cldl profile model.onnx --trace out.json`: one warm-up run, then a run with every kernel, copy and
// transfer recorded (queued / start / end) and written as Chrome trace JSON; prints the slowest nodes.
#include <algorithm>

#include "runtime/profiler.hpp"
#include "tools/cldl/commands.hpp"
#include "tools/cldl/model_cli.hpp"

namespace cldl::cli {

void add_profile_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("profile", "Profile one run of an ONNX model; write Chrome trace JSON");
  static ModelOptions mo;
  static std::string trace;
  static int top = 15;
  mo.add(cmd);
  cmd->add_option("--trace", trace, "Chrome trace JSON output (Perfetto, chrome://tracing)");
  cmd->add_option("--top", top, "Rows of the per-command table");
  cmd->callback([] {
    LoadedModel lm = load_for_cli(mo, true);
    ModelRunner session(lm);
    session.run();  // warm-up: programs built, buffers touched
    Profiler prof;
    auto t0 = std::chrono::steady_clock::now();
    session.run(&prof);
    double wall = elapsed_ms(t0);
    auto recs = prof.records();
    fmt::print("{} commands, device time {:.3f} ms, wall {:.3f} ms on {}\n", recs.size(), prof.total_ms(), wall,
               lm.ctx->device().info.name);
    std::sort(recs.begin(), recs.end(), [](auto& a, auto& b) { return a.duration_ms() > b.duration_ms(); });
    // A model placed over several devices: each command's device and queue (the trace's tracks too).
    auto& nd = lm.model->node_devices();
    bool placed = std::any_of(nd.begin(), nd.end(), [&](int d) { return d != nd.front(); });
    for (size_t i = 0; i < recs.size() && int(i) < top; ++i)
      fmt::print("  {:>10.4f} ms  {}{}\n", recs[i].duration_ms(), recs[i].name,
                 placed ? fmt::format("  [{}]", recs[i].queue) : std::string());
    if (!trace.empty()) {
      prof.write_chrome_trace(trace);
      fmt::print("trace written to {}\n", trace);
    }
  });
}

}  // namespace cldl::cli
