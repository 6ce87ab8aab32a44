// `cldl run model.onnx`: runs a model on given or random inputs, writes every output as DIR/<name>.npy,
// prints shapes, checksums and first-run / steady-state times; --stats adds the memory plan, the plan's phases and the
// algorithm of each node; --bench times --runs runs (min / median / max, --json for scripts).
#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tools/cldl/bench.hpp"
#include "tools/cldl/commands.hpp"
#include "tools/cldl/model_cli.hpp"

namespace cldl::cli {

ModelLatency time_model(LoadedModel& lm, int runs, int warmup, std::map<std::string, HostTensor>* first_outputs) {
  ModelRunner session(lm);
  auto t0 = std::chrono::steady_clock::now();
  auto out = session.run();
  ModelLatency r;
  r.first_ms = elapsed_ms(t0);
  if (first_outputs) *first_outputs = std::move(out);
  bench::Stats s = bench::time_runs([&] { session.run(); }, runs, warmup);
  r.min_ms = s.min_ms, r.median_ms = s.median_ms, r.max_ms = s.max_ms, r.runs = s.runs, r.warmup = warmup;
  return r;
}

nlohmann::json latency_json(const ModelOptions& mo, const LoadedModel& lm, const ModelLatency& t) {
  return nlohmann::json{{"model", mo.model},  {"device", lm.ctx->device().info.name},
                        {"runs", t.runs},     {"warmup", t.warmup},
                        {"min_ms", t.min_ms}, {"median_ms", t.median_ms},
                        {"max_ms", t.max_ms}, {"first_run_ms", t.first_ms},
                        {"load_ms", lm.load_ms}};
}

void print_model_latency(const ModelOptions& mo, const LoadedModel& lm, const ModelLatency& t, bool json) {
  const std::string device = lm.ctx->device().info.name;
  if (json) {
    fmt::print("{}\n", latency_json(mo, lm, t).dump());
    return;
  }
  fmt::print("latency min {:.3f} ms  median {:.3f} ms  max {:.3f} ms  ({} runs after {} warm-up on {}, inputs and "
             "outputs copied)\n",
             t.min_ms, t.median_ms, t.max_ms, t.runs, t.warmup + 1, device);
}

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run an ONNX model (--bench: latency min / median / max)");
  static ModelOptions mo;
  static std::string out_dir;
  static bool stats = false, bench = false, json = false;
  static int runs = 10;
  mo.add(cmd);
  cmd->add_option("-o,--output", out_dir, "Folder for the outputs as <name>.npy (or .pb, see --format)");
  static std::string format = "auto";
  cmd->add_option("--format", format,
                  "Output files: npy, pb (ONNX TensorProto), or auto: .npy where NumPy has the dtype, .pb for "
                  "the others (bf16, float8, float4, int4)")
      ->check(CLI::IsMember({"auto", "npy", "pb"}));
  cmd->add_flag("--stats", stats, "Print the memory plan and each node's algorithm");
  cmd->add_flag("--bench", bench, "Time --runs runs after one warm-up; print min / median / max");
  cmd->add_option("--runs", runs, "Steady-state / benchmark runs")->check(CLI::PositiveNumber);
  cmd->add_flag("--json", json, "With --bench: one JSON object on stdout");
  cmd->callback([] {
    LoadedModel lm = load_for_cli(mo, false);
    std::map<std::string, HostTensor> outputs;
    ModelLatency t = time_model(lm, runs, 0, &outputs);
    const std::string device = lm.ctx->device().info.name;
    if (bench && json) {
      print_model_latency(mo, lm, t, true);
      return;
    }
    fmt::print("model {} on {}: {} nodes ({} folded at load, {} dead removed){}\n", mo.model, device,
               lm.model->graph().nodes.size(), lm.passes.folded_nodes, lm.passes.removed_dead,
               lm.model->staged() ? fmt::format("; staged: the rest is planned from run-time data ({})", lm.model->rest_reason)
                              : std::string());
    if (!out_dir.empty()) std::filesystem::create_directories(out_dir);
    // The model's outputs (a staged plan's first stage has outputs of its own).
    for (auto& o : lm.graph_model->graph().outputs) {
      const HostTensor& t = outputs.at(o.name);
      auto v = graph::to_doubles(t);
      double sum = 0, asum = 0;
      for (double x : v) sum += x, asum += std::fabs(x);
      fmt::print("output {:<24} {} {:<16} sum {:.6g}  mean|x| {:.6g}\n", o.name, to_string(t.dtype()), t.shape().str(),
                 sum, v.empty() ? 0.0 : asum / double(v.size()));
      if (!out_dir.empty()) {
        std::string file = o.name;
        std::replace_if(file.begin(), file.end(), [](char c) { return c == '/' || c == '\\' || c == ':'; }, '_');
        const bool pb = format == "pb" || (format == "auto" && !graph::npy_supports(t.dtype()));
        if (format == "npy" && !graph::npy_supports(t.dtype()))
          fail("output '{}' is {}, which .npy cannot hold: use --format pb or auto", o.name, to_string(t.dtype()));
        auto path = std::filesystem::path(out_dir) / (file + (pb ? ".pb" : ".npy"));
        if (pb) graph::write_tensor_pb(t, path.string(), o.name);
        else graph::write_npy(t, path.string());
        if (pb && format == "auto")
          fmt::print("  {} written as ONNX TensorProto {} (.npy has no {} dtype)\n", o.name, path.string(),
                     to_string(t.dtype()));
      }
    }
    fmt::print("load {:.2f} ms, first run {:.3f} ms, steady state median {:.3f} ms over {} runs\n", lm.load_ms,
               t.first_ms, t.median_ms, runs);
    if (bench) print_model_latency(mo, lm, t, false);
    if (stats) {
      auto& p = lm.model->plan();
      fmt::print("memory plan: peak {} bytes for intermediates (sum of all intermediates {} bytes, {} tensors)\n",
                 p.arena_bytes, p.total_bytes, p.slots.size());
      const auto pc = lm.graph_model->plan_cache_stats();
      if (pc.misses) fmt::print("plan of the last signature, ms: {}\n", pc.last_plan_phases.str());
      if (lm.ctx->device_count() > 1)
        for (size_t d = 0; d < lm.ctx->device_count(); ++d)
          fmt::print("device {}: {} ({})\n", d, lm.ctx->device(int(d)).info.name,
                     lm.ctx->device(int(d)).info.platform_name);
      for (auto& line : lm.model->describe()) fmt::print("  {}\n", line);
      auto ps = ProgramCache::global().stats();
      fmt::print("programs: {} built from source, {} from the disk cache, {} from binaries, {} memory hits\n",
                 ps.builds, ps.disk_hits, ps.binary_loads, ps.memory_hits);
    }
  });
}

}  // namespace cldl::cli
