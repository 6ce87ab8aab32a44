// The benchmark registry behind `cldl bench`. Each op family adds tools/cldl/bench_<family>.cpp with a
// static BenchRegistration; `cldl bench <family> [--filter ...]` runs it. Peers that are python scripts
// either run as a batch after cldl's timings (peer_json_lines) or, for rnn and attention, as a serve-mode
// process (PeerProcess / ServePeer, tools/cldl/bench_peer.cpp) timed round by round between cldl's runs,
// whose per-round ratios (RoundRatio) are the figure to read on a machine whose speed drifts.
#pragma once
#include <sys/types.h>

#include <functional>
#include <optional>
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

// Per-round ratio of two series timed in the same rounds (num[i] / den[i], e.g. ONNX Runtime's ms over
// cldl's ms of round i): median, min and max over the rounds where both have a time. On a machine whose
// speed drifts within seconds this is steadier than the ratio of two medians.
struct RoundRatio {
  std::string label;  // "ORT/fused"
  double median = 0, min = 0, max = 0;
  int rounds = 0;
  // "per-round ratio ORT/fused median 1.12x (min 0.95x, max 1.30x) over 9 rounds"
  std::string describe() const;
};
// Rounds where either time is missing (<= 0) are left out; rounds == 0 when none is left.
RoundRatio round_ratio(const std::vector<double>& num, const std::vector<double>& den, std::string label);

struct Result {
  std::string family, name;   // "gemm", "own 1024x1024x1024"
  std::string impl;           // "cldl:own", "clblast", "openblas", "onnxruntime"
  Stats wall;                 // host wall time per run (enqueue .. finish)
  double device_ms = -1;      // median device time from profiling events, when measured
  double work = 0;            // FLOPs (or bytes when unit is "GB/s") per run
  std::string unit = "GFLOP/s";
  std::string note;           // algorithm, parameters, speed-up
  std::optional<RoundRatio> round_ratio;  // a peer timed round by round: --json adds round_ratio_* fields
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
// min / median / max of a list of times (any order; empty: all zero).
Stats summarize(std::vector<double> ms);

// Deterministic bench data of any storage type: floats in [-0.5, 0.5) for f32, bytes otherwise.
Tensor filled(Context& ctx, const Shape& s, DType t = DType::f32);
// Deterministic int64 indices in [0, range), spread over it ((i * 7919) % range).
Tensor spread_indices(Context& ctx, const Shape& s, int64_t range);
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

// A child process spoken to by lines: its stdin and stdout are pipes, its stderr goes to ours under
// CLDL_LOG=debug and to /dev/null otherwise. It never hangs the bench: a child that exits, closes its
// stdout or stays silent for longer than the timeout makes read_json / request return nullopt (once with a
// warning naming `label`, the script), and it is killed and reaped. The destructor sends "quit", closes
// the pipes and waits for it, killing it after a short grace period.
class PeerProcess {
 public:
  // Spawns argv (argv[0] looked up in PATH); ok() is false (after a warning) when that fails.
  PeerProcess(const std::vector<std::string>& argv, std::string label, double timeout_s = 300);
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;
  bool ok() const { return pid_ > 0; }  // running, and no failure so far
  const std::string& label() const { return label_; }
  // The next stdout line that parses as a JSON object (other lines are skipped); timeout_s < 0: the
  // constructor's timeout.
  std::optional<nlohmann::json> read_json(double timeout_s = -1);
  // Writes `line` and a newline, then returns the next JSON line.
  std::optional<nlohmann::json> request(const std::string& line, double timeout_s = -1);

 private:
  void fail(const std::string& why);  // warns, then stop()
  void stop();                        // "quit", close the pipes, wait (kill after a grace period)
  bool write_line(const std::string& line);
  std::string label_;
  double timeout_s_;
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string buffer_;  // stdout bytes read past the last line returned
};

// The untimed runs before each timed cldl run of an interleaved bench: `fn` repeated for at least
// `ms` (at least once). ONNX Runtime's idle threads spin for up to ~40 ms after its turn (its default,
// kept: turned off, its batch-1 LSTM ran 1.65x slower here); these runs absorb that instead of an idle
// pause, which made PoCL's next runs slow on this VM (fused attention 3.2-3.7 ms after 100 ms pauses,
// 2.4-3.0 back to back: its worker threads sleep between launches and idle vCPUs wake slowly).
void warm_for(const std::function<void()>& fn, double ms = 60);

// A serve-mode peer script (tools/bench/*_onnxruntime.py --serve): started once with every case it is to
// time; it builds and warms each case's session and announces {"ready": true, "cases": [...],
// "notes": {...}}; then run(case) times one run of that case. The bench times its own variants of a
// case once per round and then the peer once, so both see the same moment of the machine.
class ServePeer {
 public:
  struct Run {
    double ms = 0, cpu_ms = 0;
  };
  // Starts `python3 script args... --serve` (nothing, after a warning, when the script is missing);
  // does not wait for the ready line: building cldl's ops meanwhile overlaps the peer's start-up.
  ServePeer(const std::string& script, std::vector<std::string> args);
  // Waits for the ready line (once); false when the peer is missing, failed or never became ready.
  bool ready();
  // The peer announced `case_id` and is still alive.
  bool has(const std::string& case_id);
  std::string note(const std::string& case_id);  // its note for the case ("onnxruntime 1.32.0 ...")
  // One untimed and one timed run of `case_id` (the timed run's wall and process CPU ms, measured by the
  // peer around it).
  std::optional<Run> run(const std::string& case_id);

 private:
  std::optional<PeerProcess> proc_;
  std::optional<nlohmann::json> ready_;
  bool waited_ = false;
};

// The peer's turn in each round of an interleaved bench: its times in round order (0 where it gave none).
struct PeerRounds {
  std::vector<double> ms, cpu_ms;
  void add(const std::optional<ServePeer::Run>& r);
  // Its row over the rounds it answered (none when it answered none): min / median / max, the note
  // "<peer_note>; cpu X ms/run (median)", and the per-round ratio over `ours_ms` (the same rounds).
  std::optional<Result> row(const std::string& family, const std::string& name, double work,
                            const std::string& peer_note, const std::vector<double>& ours_ms,
                            const std::string& label) const;
};

}  // namespace cldl::bench
