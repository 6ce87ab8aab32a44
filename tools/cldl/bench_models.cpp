// `cldl bench model.onnx` and `cldl bench FOLDER`: model latency against the peers on the same inputs in
// alternating rounds: ONNX Runtime's CPU session, and OpenVINO's CPU plugin where it is installed
// (tools/bench/model_onnxruntime.py serves both), with the CPU's core count of threads.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tools/cldl/bench.hpp"
#include "tools/cldl/commands.hpp"
#include "tools/cldl/model_cli.hpp"

namespace cldl::cli {

namespace {

struct PeerCase {
  std::string id, label;  // the served case, the name printed ("onnxruntime", "openvino")
};
const PeerCase kPeers[] = {{"model", "onnxruntime"}, {"openvino", "openvino"}};

struct PeerTimes {
  std::string label, note;
  double median_ms = 0;
  bench::RoundRatio ratio;  // peer / cldl per round
};

struct ModelBench {
  ModelLatency t;
  std::vector<PeerTimes> peers;  // the peers that answered
  int threads = 0;
};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The model's latency, and each peer's on the very inputs cldl runs (random ones included, written as .npy).
ModelBench bench_against_peers(LoadedModel& lm, const std::string& model, int runs, int warmup, bool compare) {
  ModelBench r;
  ModelRunner session(lm);
  if (!compare) {
    r.t = time_model(lm, runs, warmup);
    return r;
  }
  const std::string dir = (std::filesystem::temp_directory_path() /
                           fmt::format("cldl-bench-{}-{}", ::getpid(), std::hash<std::string>{}(model)))
                              .string();
  std::filesystem::create_directories(dir);
  r.threads = int(std::max<uint32_t>(lm.ctx->device().info.compute_units, 1));
  std::vector<std::string> args{model, "--threads", std::to_string(r.threads), "--warmup", std::to_string(warmup)};
  int k = 0;
  for (auto& [name, t] : lm.all_inputs) {
    std::string f = fmt::format("{}/in{}.npy", dir, k++);
    graph::write_npy(t, f);
    args.push_back("--input");
    args.push_back(name + "=" + f);
  }
  bench::ServePeer peer(bench::peer_script("model_onnxruntime.py"), args);
  auto t_first = std::chrono::steady_clock::now();
  session.run();
  r.t.first_ms = elapsed_ms(t_first);
  for (int i = 0; i < warmup; ++i) session.run();
  std::vector<const PeerCase*> cases;
  if (peer.ready())
    for (const auto& c : kPeers)
      if (peer.has(c.id)) cases.push_back(&c);
  std::vector<double> ours;
  std::vector<bench::PeerRounds> theirs(cases.size());
  for (int round = 0; round < runs; ++round) {
    // Untimed runs right before, for at least 60 ms: they absorb the peers' idle threads, which spin for
    // up to ~40 ms after their turn (bench::warm_for); one run of a small model did not, and read slow.
    bench::warm_for([&] { session.run(); });
    auto t0 = std::chrono::steady_clock::now();
    session.run();
    ours.push_back(elapsed_ms(t0));
    for (size_t c = 0; c < cases.size(); ++c) theirs[c].add(peer.run(cases[c]->id));
  }
  std::filesystem::remove_all(dir);
  std::vector<double> sorted = ours;
  std::sort(sorted.begin(), sorted.end());
  r.t.min_ms = sorted.front(), r.t.median_ms = sorted[sorted.size() / 2], r.t.max_ms = sorted.back();
  r.t.runs = runs, r.t.warmup = warmup;
  for (size_t c = 0; c < cases.size(); ++c) {
    std::vector<double> got;
    for (double v : theirs[c].ms)
      if (v > 0) got.push_back(v);
    if (got.empty()) continue;
    r.peers.push_back({cases[c]->label, peer.note(cases[c]->id), median_of(got),
                       bench::round_ratio(theirs[c].ms, ours, cases[c]->label + " / cldl")});
  }
  return r;
}

void add_peers_json(nlohmann::json& j, const ModelBench& b) {
  for (const auto& p : b.peers) {
    j[p.label + "_median_ms"] = p.median_ms;
    j[p.label + "_threads"] = b.threads;
    j[p.label + "_ratio_median"] = p.ratio.median;
  }
  // The earlier key of ONNX Runtime's ratio, kept for scripts.
  for (const auto& p : b.peers)
    if (p.label == "onnxruntime") j["ratio_median"] = p.ratio.median;
}

// Inputs as a spec file gives them (tools/bench/export_models.py, tools/bench/models_vs_ort.py): floats
// standard normal, integer masks (a name with "mask") ones, other integers uniform in [0, 100).
std::vector<std::string> spec_inputs(const std::filesystem::path& spec_path, const std::string& dir, uint32_t seed) {
  std::ifstream f(spec_path);
  nlohmann::json spec;
  try {
    spec = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail("{}: not a JSON input spec ({})", spec_path.string(), e.what());
  }
  if (!spec.contains("inputs") || !spec["inputs"].is_object())
    fail("{}: expected {{\"inputs\": {{NAME: [DTYPE, SHAPE]}}}}", spec_path.string());
  std::vector<std::string> given;
  std::mt19937 rng(seed);
  int k = 0;
  for (auto& [name, v] : spec["inputs"].items()) {
    if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_array())
      fail("{}: input '{}' should be [DTYPE, SHAPE]", spec_path.string(), name);
    const DType t = parse_dtype(v[0].get<std::string>());
    std::vector<int64_t> dims;
    for (auto& d : v[1]) dims.push_back(d.get<int64_t>());
    Shape s(dims);
    std::vector<double> d(size_t(s.numel()));
    const bool is_float = t == DType::f32 || t == DType::f16 || t == DType::f64 || t == DType::bf16;
    std::normal_distribution<double> normal;
    std::uniform_int_distribution<int> ints(0, 99);
    for (auto& x : d) x = is_float ? normal(rng) : name.find("mask") != std::string::npos ? 1.0 : double(ints(rng));
    const std::string file = fmt::format("{}/spec{}.npy", dir, k++);
    graph::write_npy(graph::from_doubles(t, s, d), file);
    given.push_back(name + "=" + file);
  }
  return given;
}

}  // namespace

void bench_model(ModelOptions mo, int runs, int warmup, bool json, bool compare) {
  LoadedModel lm = load_for_cli(mo, false);
  if (!json)
    fmt::print("model {} on {}: {} nodes, load {:.2f} ms\n", mo.model, lm.ctx->device().info.name,
               lm.model->graph().nodes.size(), lm.load_ms);
  ModelBench b = bench_against_peers(lm, mo.model, runs, warmup, compare);
  if (json) {
    nlohmann::json j = latency_json(mo, lm, b.t);
    add_peers_json(j, b);
    fmt::print("{}\n", j.dump());
    return;
  }
  print_model_latency(mo, lm, b.t, false);
  if (!compare) return;
  if (b.peers.empty()) {
    fmt::print("onnxruntime: no peer (needs python3 with onnxruntime and numpy; see tools/bench/model_onnxruntime.py)\n");
    return;
  }
  for (const auto& p : b.peers) fmt::print("{} median {:.3f} ms ({})\n{}\n", p.label, p.median_ms, p.note, p.ratio.describe());
}

void bench_folder(const std::string& dir, const ModelOptions& base, int runs, int warmup, bool json, bool compare) {
  std::vector<std::filesystem::path> models;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".onnx") models.push_back(e.path());
  std::sort(models.begin(), models.end());
  if (models.empty()) fail("cldl bench {}: no .onnx file in the folder", dir);
  const std::string tmp = (std::filesystem::temp_directory_path() / fmt::format("cldl-bench-inputs-{}", ::getpid())).string();
  std::filesystem::create_directories(tmp);
  struct Row {
    std::string name;
    double ms = 0;
    std::map<std::string, std::pair<double, double>> peers;  // label -> (median ms, ratio)
    std::string error;
  };
  std::vector<Row> rows;
  for (const auto& path : models) {
    Row row;
    row.name = path.filename().string();
    try {
      ModelOptions mo = base;
      mo.model = path.string();
      auto spec = std::filesystem::path(path).replace_extension(".json");
      if (std::filesystem::exists(spec)) {
        auto given = spec_inputs(spec, tmp, 0);
        mo.inputs.insert(mo.inputs.end(), given.begin(), given.end());
      } else {
        mo.random = true;
      }
      LoadedModel lm = load_for_cli(mo, false);
      ModelBench b = bench_against_peers(lm, mo.model, runs, warmup, compare);
      row.ms = b.t.median_ms;
      for (const auto& p : b.peers) row.peers[p.label] = {p.median_ms, p.ratio.median};
      if (json) {
        nlohmann::json j = latency_json(mo, lm, b.t);
        add_peers_json(j, b);
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("{:<44} cldl {:9.3f} ms", row.name, row.ms);
        for (const auto& [label, v] : row.peers) fmt::print("  {} {:9.3f} ms {:6.2f}x", label, v.first, v.second);
        fmt::print("\n");
      }
    } catch (const std::exception& e) {
      row.error = e.what();
      if (json) fmt::print("{}\n", nlohmann::json{{"model", path.string()}, {"error", row.error}}.dump());
      else fmt::print("{:<44} FAILED: {}\n", row.name, row.error);
    }
    std::fflush(stdout);
    rows.push_back(std::move(row));
  }
  std::filesystem::remove_all(tmp);
  // Geometric means of peer / cldl over the models each peer ran.
  std::map<std::string, std::pair<double, int>> logs;
  int failed = 0;
  for (const auto& r : rows) {
    failed += !r.error.empty();
    for (const auto& [label, v] : r.peers)
      if (v.second > 0) logs[label].first += std::log(v.second), logs[label].second++;
  }
  nlohmann::json summary{{"models", rows.size()}, {"failed", failed}};
  for (const auto& [label, l] : logs) {
    const double geo = std::exp(l.first / l.second);
    summary[label + "_geomean_ratio"] = geo;
    summary[label + "_models"] = l.second;
    if (!json)
      fmt::print("geometric mean {} / cldl: {:.2f}x over {} models (above 1: cldl faster)\n", label, geo, l.second);
  }
  if (json) fmt::print("{}\n", nlohmann::json{{"summary", summary}}.dump());
  if (failed) fail("cldl bench {}: {} of {} models failed (listed above)", dir, failed, rows.size());
}

}  // namespace cldl::cli
