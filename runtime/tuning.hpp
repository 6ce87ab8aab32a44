// Tuning databases and the search engine behind `cldl tune`.
//
// A database is JSON (format "cldl-tuning-1"): a list of entries, each for one device key (type,
// vendor, name, driver, library version; any field may be "*"), holding per kernel family ("gemm",
// "conv", "attention", "clblast_xgemm") a map from problem key (the shape, spelled by the family) to
// the parameters found best. Lookup follows CLBlast's scheme, most specific first:
//   name + driver + library  ->  name + driver  ->  name  ->  vendor + type  ->  type  ->  none
// and at each level the user database ($CLDL_CACHE_DIR/tuning.json, see ProgramCache::global) wins
// over the databases shipped in tuning/*.json (embedded at build time). No entry = the op's own
// heuristic default. The runtime never tunes on its own; `cldl tune` writes the user database.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/device.hpp"

namespace cldl::tuning {

// One configuration: parameter name -> value (all tunables are integers; enums by number).
using Params = std::map<std::string, int64_t>;
std::string to_string(const Params& p);  // "mr=6 nr=16"

struct DeviceKey {
  std::string type, vendor, name, driver, library;
};
DeviceKey device_key(const DeviceInfo& info);  // library = library_version()

struct Tuned {
  Params params;
  double ms = 0;          // time of the best candidate when tuned (0 = unknown)
  double default_ms = 0;  // time of the heuristic default in the same run (0 = unknown)
};

struct Entry {
  DeviceKey device;
  std::map<std::string, std::map<std::string, Tuned>> kernels;  // family -> problem key -> result
  double tuning_seconds = 0;
  std::string tuned_at;  // ISO time of the run
};

class Database {
 public:
  // Parses a JSON document; throws Error naming `origin` (a file name) and what is wrong.
  static Database parse(std::string_view json_text, std::string origin);
  static Database load_file(const std::string& path);  // missing file = empty database
  std::string dump() const;
  void save_file(const std::string& path) const;  // atomic (temp file + rename)

  // The entry whose device key is exactly `key` (created when absent).
  Entry& entry_for(const DeviceKey& key);
  const std::vector<Entry>& entries() const { return entries_; }
  const std::string& origin() const { return origin_; }

 private:
  std::vector<Entry> entries_;
  std::string origin_;
};

// 0 = exact (name + driver + library) ... 4 = device type; -1 = the entry does not match the device.
int match_level(const DeviceKey& entry, const DeviceKey& device);
std::string_view level_name(int level);

struct Match {
  Tuned tuned;
  std::string source;  // "user db /path (name+driver+library)" or "shipped tuning/x.json (device type)"
};

// The databases the runtime consults, in priority order at equal level: the user database, then the
// shipped ones. Loaded once on first use; reload() re-reads (after `cldl tune` wrote the user file).
class Registry {
 public:
  static Registry& global();
  std::optional<Match> lookup(const DeviceInfo& info, std::string_view family, std::string_view problem) const;
  // Every (family, problem) the device resolves to, with its source (for `cldl tune --show`).
  std::vector<std::pair<std::string, Match>> resolve_all(const DeviceInfo& info) const;
  void reload();
  static std::string user_path();  // <cache dir>/tuning.json, or $CLDL_TUNING_FILE
  // Replace the databases (tests).
  void set(std::vector<Database> dbs);
  const std::vector<Database>& databases() const;

 private:
  Registry();
  std::vector<Database> dbs_;
};

// Whether layers consult the database: on by default; CLDL_TUNING=0 (or off/none) turns it off, and
// `cldl bench --tuning` switches it per measurement with ScopedMode.
bool enabled();
void set_enabled(bool on);
struct ScopedEnabled {
  explicit ScopedEnabled(bool on) : prev_(enabled()) { set_enabled(on); }
  ~ScopedEnabled() { set_enabled(prev_); }
  ScopedEnabled(const ScopedEnabled&) = delete;
  ScopedEnabled& operator=(const ScopedEnabled&) = delete;

 private:
  bool prev_;
};

// Layers call this at create: the tuned parameters for (family, problem) when tuning is enabled and
// the database has an entry; logs at debug level which entry (or "heuristic default") is used.
std::optional<Tuned> find(const DeviceInfo& info, std::string_view family, std::string_view problem);

// ---- search ----------------------------------------------------------------------------------------

struct Dimension {
  std::string name;
  std::vector<int64_t> values;
};
struct Space {
  std::vector<Dimension> dims;
  double size() const;  // number of combinations
};

struct Evaluation {
  bool ok = false;          // ran (false: build or launch failed; `error` says why)
  double ms = 0;            // best time of the timed runs
  std::vector<float> out;   // the result, checked by the engine against the reference
  std::string error;
};

struct SearchOptions {
  double budget_s = 60;            // wall-clock limit of this search
  double exhaustive_limit = 48;    // spaces up to this size are tried exhaustively
  int random_samples = 24;         // large spaces: random candidates before local refinement
  uint64_t seed = 1;
  float rtol = 1e-3f, atol = 1e-4f;  // result check: |out - ref| <= atol + rtol * |ref|
  const std::atomic<bool>* stop = nullptr;  // set (from SIGINT) to end early, keeping what was found
  // Called after each candidate: done, planned (estimate), best ms so far (0 = none yet).
  std::function<void(size_t done, size_t planned, double best_ms)> progress;
};

struct SearchResult {
  std::optional<Params> best;
  double best_ms = 0;
  size_t evaluated = 0, skipped_invalid = 0, rejected_wrong = 0, failed = 0;
  bool interrupted = false;  // budget or stop flag ended the search
  std::vector<std::string> log;  // one line per rejected / failed candidate (first few)
};

// Searches `space`: exhaustive when small, else `start` (the heuristic default, always tried first
// when given), random samples, then local refinement (one dimension at a time, neighbours of the best)
// until the budget is spent. `invalid` returns why a configuration cannot run (empty = valid); such
// candidates are skipped before `evaluate` is called, i.e. before anything is built. A candidate whose
// output differs from `reference` (size or values) is rejected and its time ignored.
SearchResult search(const Space& space, const std::function<std::string(const Params&)>& invalid,
                    const std::function<Evaluation(const Params&)>& evaluate, const std::vector<float>& reference,
                    const SearchOptions& opts, const std::optional<Params>& start = std::nullopt);

// Compares `out` with `ref`; returns an empty string when they agree, else where they first differ.
std::string compare_results(const std::vector<float>& out, const std::vector<float>& ref, float rtol, float atol);

}  // namespace cldl::tuning
