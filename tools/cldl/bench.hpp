// The benchmark registry behind `cldl bench`. Each op family adds tools/cldl/bench_<family>.cpp with a
// static BenchRegistration; `cldl bench <family> [--filter ...]` runs it.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "layers/op.hpp"
#include "runtime/context.hpp"

namespace cldl::bench {

struct Options {
  std::string device;               // device spec
  int runs = 10, warmup = 2;        // timed runs and untimed warm-up runs per case
  bool json = false;                // one JSON object per line instead of a table
  bool compare = true;              // also time the peer (OpenBLAS, ONNX Runtime) where installed
  std::vector<std::string> filter;  // case-name substrings; empty = all
  std::vector<std::string> args;    // family-specific key=value settings
  // Tuning database: "db" (layers use it, the default), "default" (heuristic defaults only), "compare"
  // (families that support it time both, e.g. gemm: own and CLBlast default vs tuned; conv: automatic).
  std::string tuning = "db";
  bool selected(const std::string& case_name) const;
};

struct Stats {
  double min_ms = 0, median_ms = 0, max_ms = 0;
  int runs = 0;
};

struct Result {
  std::string family, name;   // "gemm", "own 1024x1024x1024"
  std::string impl;           // "cldl:own", "clblast", "openblas", "onnxruntime"
  Stats wall;                 // host wall time per run (enqueue .. finish)
  double device_ms = -1;      // median device time from profiling events, when measured
  double work = 0;            // FLOPs (or bytes when unit is "GB/s") per run
  std::string unit = "GFLOP/s";
  std::string note;           // algorithm, parameters, speed-up
  double rate() const { return work > 0 && wall.median_ms > 0 ? work / (wall.median_ms * 1e6) : 0; }
};

class Reporter {
 public:
  explicit Reporter(const Options& o) : opts_(o) {}
  void add(const Result& r);  // prints immediately (table row or JSON line)
  const std::vector<Result>& results() const { return results_; }
  // Ratio of two results' median times (b / a: how many times faster a is than b).
  static double speedup(const Result& a, const Result& b) { return b.wall.median_ms / a.wall.median_ms; }

 private:
  const Options& opts_;
  std::vector<Result> results_;
  bool header_ = false;
};

// Times `fn` (which must finish its work before returning): `warmup` untimed calls, then `runs` timed.
Stats time_runs(const std::function<void()>& fn, int runs, int warmup);

// Deterministic bench data of any storage type: floats in [-0.5, 0.5) for f32, bytes otherwise.
Tensor filled(Context& ctx, const Shape& s, DType t = DType::f32);
// Times one op case of `family` (enqueue + finish per run, with a workspace when the op asks for one)
// and reports `work` per run in `unit` (bytes for GB/s, operations for GOP/s); skipped unless selected.
void time_op(Context& ctx, const Options& opts, Reporter& rep, const std::string& family, const std::string& name,
             Op& op, const std::vector<Tensor>& in, const std::vector<Tensor>& out, double work,
             const char* unit = "GB/s");

using Fn = std::function<void(Context& ctx, const Options& opts, Reporter& rep)>;
struct Registration {
  Registration(std::string family, std::string description, Fn fn);
};
struct Family {
  std::string name, description;
  Fn fn;
};
const std::vector<Family>& families();

// Peers measured in the same run are python scripts in tools/bench/ (ONNX Runtime). peer_script finds
// `name` there: next to the CLI's source folder (__FILE__ is relative to the build folder under ccache),
// next to the executable's build folder, or under the working folder; empty when none exists.
std::string peer_script(const std::string& name);
// Runs `cmd` (stderr dropped) and returns the stdout lines that parse as JSON objects holding `key`.
std::vector<nlohmann::json> peer_json_lines(const std::string& cmd, const std::string& key);

}  // namespace cldl::bench
