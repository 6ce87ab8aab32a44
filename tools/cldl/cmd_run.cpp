// `cldl run model.onnx`: runs a model on given or random inputs, writes every output as DIR/<name>.npy,
// prints shapes, checksums and first-run / steady-state times; --stats adds the memory plan and the
// algorithm of each node; --bench times --runs runs (min / median / max, --json for scripts).
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "tools/cldl/commands.hpp"
#include "tools/cldl/model_cli.hpp"

namespace cldl::cli {

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run an ONNX model (--bench: latency min / median / max)");
  static ModelOptions mo;
  static std::string out_dir;
  static bool stats = false, bench = false, json = false;
  static int runs = 10;
  mo.add(cmd);
  cmd->add_option("-o,--output", out_dir, "Folder for the outputs as <name>.npy");
  cmd->add_flag("--stats", stats, "Print the memory plan and each node's algorithm");
  cmd->add_flag("--bench", bench, "Time --runs runs after one warm-up; print min / median / max");
  cmd->add_option("--runs", runs, "Steady-state / benchmark runs")->check(CLI::PositiveNumber);
  cmd->add_flag("--json", json, "With --bench: one JSON object on stdout");
  cmd->callback([] {
    LoadedModel lm = load_for_cli(mo, false);
    auto session = lm.model->session();
    auto t0 = std::chrono::steady_clock::now();
    auto outputs = session->run(lm.inputs);
    double first_ms = elapsed_ms(t0);
    std::vector<double> ms;
    for (int i = 0; i < runs; ++i) {
      auto t = std::chrono::steady_clock::now();
      session->run(lm.inputs);
      ms.push_back(elapsed_ms(t));
    }
    std::sort(ms.begin(), ms.end());
    double median = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
    const std::string device = lm.ctx->device().info.name;
    if (bench && json) {
      nlohmann::json j{{"model", mo.model}, {"device", device}, {"runs", runs},      {"min_ms", ms.front()},
                       {"median_ms", median}, {"max_ms", ms.back()}, {"first_run_ms", first_ms}, {"load_ms", lm.load_ms}};
      fmt::print("{}\n", j.dump());
      return;
    }
    fmt::print("model {} on {}: {} nodes ({} folded at load, {} dead removed)\n", mo.model, device,
               lm.model->graph().nodes.size(), lm.passes.folded_nodes, lm.passes.removed_dead);
    if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
    for (auto& o : lm.model->graph().outputs) {
      const HostTensor& t = outputs.at(o.name);
      auto v = graph::to_doubles(t);
      double sum = 0, asum = 0;
      for (double x : v) sum += x, asum += std::fabs(x);
      fmt::print("output {:<24} {} {:<16} sum {:.6g}  mean|x| {:.6g}\n", o.name, to_string(t.dtype()), t.shape().str(),
                 sum, v.empty() ? 0.0 : asum / double(v.size()));
      if (!out_dir.empty()) {
        std::string file = o.name;
        std::replace_if(file.begin(), file.end(), [](char c) { return c == '/' || c == '\\' || c == ':'; }, '_');
        graph::write_npy(t, (std::filesystem::path(out_dir) / (file + ".npy")).string());
      }
    }
    fmt::print("load {:.2f} ms, first run {:.3f} ms, steady state median {:.3f} ms over {} runs\n", lm.load_ms, first_ms,
               median, runs);
    if (bench)
      fmt::print("latency min {:.3f} ms  median {:.3f} ms  max {:.3f} ms  ({} runs, inputs and outputs copied)\n",
                 ms.front(), median, ms.back(), runs);
    if (stats) {
      auto& p = lm.model->plan();
      fmt::print("memory plan: peak {} bytes for intermediates (sum of all intermediates {} bytes, {} tensors)\n",
                 p.arena_bytes, p.total_bytes, p.slots.size());
      for (auto& line : lm.model->describe()) fmt::print("  {}\n", line);
    }
  });
}

}  // namespace cldl::cli
