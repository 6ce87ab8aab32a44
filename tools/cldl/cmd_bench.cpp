// `cldl bench <family>...`: runs registered op benchmarks; prints min / median / max and rates (--json:
// one object per result; a peer timed round by round adds round_ratio_of / _median / _min / _max / _rounds).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/tuning.hpp"
#include "tools/cldl/bench.hpp"
#include "tools/cldl/commands.hpp"
#include "tools/cldl/model_cli.hpp"

namespace cldl::bench {

std::string peer_script(const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates{fs::path(__FILE__).parent_path().parent_path() / "bench" / name,
                                   fs::path("tools") / "bench" / name};
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "tools" / "bench" / name);
  for (const auto& c : candidates)
    if (fs::exists(c)) return c.string();
  return {};
}

std::vector<nlohmann::json> peer_json_lines(const std::string& cmd, const std::string& key) {
  std::vector<nlohmann::json> out;
  FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!p) return out;
  char line[4096];
  while (std::fgets(line, sizeof line, p)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains(key)) out.push_back(std::move(j));
  }
  pclose(p);
  return out;
}

namespace {
std::vector<Family>& registry() {
  static std::vector<Family> r;
  return r;
}
}  // namespace

Registration::Registration(std::string family, std::string description, Fn fn) {
  registry().push_back({std::move(family), std::move(description), std::move(fn)});
}
const std::vector<Family>& families() { return registry(); }

bool Options::selected(const std::string& case_name) const {
  if (filter.empty()) return true;
  for (const auto& f : filter)
    if (case_name.find(f) != std::string::npos) return true;
  return false;
}

Stats time_runs(const std::function<void()>& fn, int runs, int warmup) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < std::max(1, runs); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return summarize(std::move(ms));
}

Stats summarize(std::vector<double> ms) {
  Stats s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  s.runs = static_cast<int>(ms.size());
  s.min_ms = ms.front();
  s.max_ms = ms.back();
  s.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  return s;
}

Tensor filled(Context& ctx, const Shape& s, DType t) {
  HostTensor h(t, s);
  for (int64_t i = 0; i < h.numel(); ++i) {
    const uint32_t v = uint32_t(i * 2654435761u);
    if (t == DType::f32)
      h.as<float>()[i] = float(v % 1000) / 1000.0f - 0.5f;
    else
      static_cast<uint8_t*>(h.data())[i] = uint8_t(v >> 24);
  }
  return ctx.upload(h);
}

Tensor spread_indices(Context& ctx, const Shape& s, int64_t range) {
  HostTensor h(DType::i64, s);
  for (int64_t i = 0; i < s.numel(); ++i) h.as<int64_t>()[i] = (i * 7919) % range;
  return ctx.upload(h);
}

void time_op(Context& ctx, const Options& opts, Reporter& rep, const std::string& family, const std::string& name,
             Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out, double work, const char* unit) {
  if (!opts.selected(name)) return;
  auto q = ctx.queue();
  Tensor ws;
  if (op.workspace_bytes()) ws = ctx.alloc(Shape{int64_t((op.workspace_bytes() + 3) / 4)}, DType::f32);
  Result r;
  r.family = family;
  r.name = name;
  r.impl = "cldl";
  r.unit = unit;
  r.work = work;
  r.note = op.algorithm();
  r.wall = time_runs(
      [&] {
        ExecutionContext ec(q);
        op.enqueue(in, out, ws.valid() ? &ws : nullptr, ec);
        q.finish();
      },
      opts.runs, opts.warmup);
  rep.add(r);
}

void Reporter::add(const Result& r) {
  results_.push_back(r);
  if (opts_.json) {
    nlohmann::json j{{"family", r.family}, {"name", r.name},         {"impl", r.impl},
                     {"min_ms", r.wall.min_ms}, {"median_ms", r.wall.median_ms}, {"max_ms", r.wall.max_ms},
                     {"runs", r.wall.runs}, {"unit", r.unit},         {"rate", r.rate()},
                     {"note", r.note}};
    if (r.device_ms >= 0) j["device_ms"] = r.device_ms;
    if (r.round_ratio) {
      j["round_ratio_of"] = r.round_ratio->label;
      j["round_ratio_rounds"] = r.round_ratio->rounds;
      if (r.round_ratio->rounds > 0) {
        j["round_ratio_median"] = r.round_ratio->median;
        j["round_ratio_min"] = r.round_ratio->min;
        j["round_ratio_max"] = r.round_ratio->max;
      }
    }
    std::puts(j.dump().c_str());
  } else {
    if (!header_) {
      fmt::print("{:<8} {:<44} {:<14} {:>10} {:>10} {:>10} {:>15}  {}\n", "family", "case", "impl", "min ms",
                 "median ms", "max ms", "rate", "note");
      header_ = true;
    }
    fmt::print("{:<8} {:<44} {:<14} {:>10.3f} {:>10.3f} {:>10.3f} {:>15}  {}\n", r.family, r.name, r.impl,
               r.wall.min_ms, r.wall.median_ms, r.wall.max_ms,
               r.work > 0 ? fmt::format("{:.2f} {}", r.rate(), r.unit) : "-", r.note);
  }
  std::fflush(stdout);
}

}  // namespace cldl::bench

namespace cldl::cli {

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Benchmark op families (gemm, conv, ...), a model.onnx or a folder of models: min / median / max");
  static bench::Options opts;
  static std::vector<std::string> which;
  static bool list = false;
  static ModelOptions model;  // `cldl bench model.onnx`: inputs, symbolic dims, --random
  cmd->add_option("families", which,
                  "Families to run (default: all; see --list), one model.onnx, or a folder of models (./NAME where a "
                  "folder has a family's name)");
  cmd->add_option("-d,--device", opts.device, "Device spec")->envname("CLDL_DEVICE");
  cmd->add_option("--runs", opts.runs, "Timed runs per case")->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", opts.warmup, "Untimed runs first")->check(CLI::NonNegativeNumber);
  cmd->add_option("--filter", opts.filter, "Only cases whose name contains one of these");
  cmd->add_option("--set", opts.args, "Family settings as key=value");
  cmd->add_flag("--json", opts.json, "One JSON object per result line");
  cmd->add_flag("!--no-compare", opts.compare, "Skip the peer measurements");
  cmd->add_flag("--compare", opts.compare, "Time the peer too, with the ratio (the default)");
  cmd->add_flag("--list", list, "List the families");
  cmd->add_option("-i,--input", model.inputs, "Model bench: NAME=FILE (.npy or ONNX .pb tensor)");
  cmd->add_option("--dim", model.dims, "Model bench: NAME=VALUE for a symbolic input dimension");
  cmd->add_flag("--random", model.random, "Model bench: random data for the inputs not given");
  cmd->add_option("--place", model.place,
                  "Model bench: NODE=DEV placement over the devices of --device (see cldl run --place)");
  cmd->add_option("--tuning", opts.tuning, "Tuning database: db (use it), default (heuristics only), compare (both)")
      ->check(CLI::IsMember({"db", "default", "compare"}));
  cmd->callback([] {
    // A bare family name is the family even where a folder of that name is in the way (`cldl bench kernels` at the
    // repository root, beside kernels/); `./kernels` names the folder.
    const bool family_name =
        !which.empty() && which[0].find('/') == std::string::npos &&
        std::any_of(bench::families().begin(), bench::families().end(), [&](auto& f) { return f.name == which[0]; });
    if (!which.empty() && !family_name && std::filesystem::is_directory(which[0])) {
      if (which.size() > 1) fail("cldl bench {}: one folder at a time (got '{}' too)", which[0], which[1]);
      model.device = opts.device;
      bench_folder(which[0], model, opts.runs, opts.warmup, opts.json, opts.compare);
      return;
    }
    if (!which.empty() && std::filesystem::path(which[0]).extension() == ".onnx") {
      if (which.size() > 1) fail("cldl bench {}: one model at a time (got '{}' too)", which[0], which[1]);
      model.model = which[0];
      model.device = opts.device;
      bench_model(model, opts.runs, opts.warmup, opts.json, opts.compare);
      return;
    }
    if (list) {
      for (const auto& f : bench::families()) fmt::print("{:<12} {}\n", f.name, f.description);
      return;
    }
    for (const auto& w : which) {
      bool known = std::any_of(bench::families().begin(), bench::families().end(), [&](auto& f) { return f.name == w; });
      if (!known) fail("unknown bench family '{}' (see cldl bench --list)", w);
    }
    if (opts.tuning == "default") tuning::set_enabled(false);
    auto ctx = Context::create(opts.device);
    if (!opts.json)
      fmt::print("device: {} ({}), {} runs after {} warm-up\n", ctx->device().info.name, ctx->device().info.platform_name,
                 opts.runs, opts.warmup);
    bench::Reporter rep(opts);
    for (const auto& f : bench::families())
      if (which.empty() || std::find(which.begin(), which.end(), f.name) != which.end()) f.fn(*ctx, opts, rep);
  });
}

}  // namespace cldl::cli
