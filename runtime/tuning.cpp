// Tuning databases (JSON, keys with CLBlast-style fallbacks, user file over shipped files) and the
// candidate search used by `cldl tune`.
#include "runtime/tuning.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/log.hpp"
#include "runtime/program_cache.hpp"

namespace cldl {
namespace detail {
struct EmbeddedTuning {
  const char* name;
  const char* text;
};
extern const EmbeddedTuning kEmbeddedTuning[];  // generated from tuning/*.json (cmake/EmbedTuning.cmake)
extern const std::size_t kEmbeddedTuningCount;
}  // namespace detail

namespace tuning {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
constexpr const char* kFormat = "cldl-tuning-1";

bool env_enabled() {
  const char* v = std::getenv("CLDL_TUNING");
  if (!v) return true;
  std::string s(v);
  return !(s == "0" || s == "off" || s == "none");
}
std::atomic<bool> g_enabled{env_enabled()};

bool field_matches(const std::string& entry, const std::string& device) { return entry == "*" || entry == device; }
}  // namespace

std::string to_string(const Params& p) {
  std::string s;
  for (const auto& [k, v] : p) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v);
  return s;
}

DeviceKey device_key(const DeviceInfo& info) {
  return {std::string(cldl::to_string(info.type)), info.vendor, info.name, info.driver_version,
          std::string(library_version())};
}

int match_level(const DeviceKey& e, const DeviceKey& d) {
  if (!field_matches(e.type, d.type)) return -1;
  // A level is the most specific set of fields the entry pins down (the others must be "*").
  const bool name = e.name != "*", driver = e.driver != "*", lib = e.library != "*", vendor = e.vendor != "*";
  if (name && !field_matches(e.name, d.name)) return -1;
  if (driver && !field_matches(e.driver, d.driver)) return -1;
  if (lib && !field_matches(e.library, d.library)) return -1;
  if (vendor && !field_matches(e.vendor, d.vendor)) return -1;
  if (name && driver && lib) return 0;
  if (name && driver) return 1;
  if (name) return 2;
  if (vendor) return 3;
  return 4;
}

std::string_view level_name(int level) {
  switch (level) {
    case 0: return "name+driver+library";
    case 1: return "name+driver";
    case 2: return "name";
    case 3: return "vendor+type";
    case 4: return "device type";
  }
  return "no match";
}

Database Database::parse(std::string_view text, std::string origin) {
  Database db;
  db.origin_ = std::move(origin);
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    fail("tuning database {}: not valid JSON: {}", db.origin_, e.what());
  }
  try {
    if (!j.is_object() || j.value("format", "") != kFormat)
      fail("tuning database {}: expected an object with \"format\": \"{}\"", db.origin_, kFormat);
    for (const auto& je : j.at("entries")) {
      Entry e;
      const auto& d = je.at("device");
      e.device = {d.value("type", "*"), d.value("vendor", "*"), d.value("name", "*"), d.value("driver", "*"),
                  d.value("library", "*")};
      e.tuning_seconds = je.value("tuning_seconds", 0.0);
      e.tuned_at = je.value("tuned_at", "");
      for (const auto& [family, problems] : je.at("kernels").items())
        for (const auto& [problem, jt] : problems.items()) {
          Tuned t;
          for (const auto& [k, v] : jt.at("params").items()) t.params[k] = v.get<int64_t>();
          t.ms = jt.value("ms", 0.0);
          t.default_ms = jt.value("default_ms", 0.0);
          e.kernels[family][problem] = std::move(t);
        }
      db.entries_.push_back(std::move(e));
    }
  } catch (const json::exception& e) {
    fail("tuning database {}: {}", db.origin_, e.what());
  }
  return db;
}

Database Database::load_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    Database db;
    db.origin_ = path;
    return db;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return parse(ss.str(), path);
}

std::string Database::dump() const {
  json j;
  j["format"] = kFormat;
  j["entries"] = json::array();
  for (const auto& e : entries_) {
    json je;
    je["device"] = {{"type", e.device.type},     {"vendor", e.device.vendor},   {"name", e.device.name},
                    {"driver", e.device.driver}, {"library", e.device.library}};
    if (e.tuning_seconds > 0) je["tuning_seconds"] = std::round(e.tuning_seconds * 10) / 10;
    if (!e.tuned_at.empty()) je["tuned_at"] = e.tuned_at;
    je["kernels"] = json::object();
    for (const auto& [family, problems] : e.kernels)
      for (const auto& [problem, t] : problems) {
        json jt;
        jt["params"] = json::object();
        for (const auto& [k, v] : t.params) jt["params"][k] = v;
        if (t.ms > 0) jt["ms"] = std::round(t.ms * 1000) / 1000;
        if (t.default_ms > 0) jt["default_ms"] = std::round(t.default_ms * 1000) / 1000;
        je["kernels"][family][problem] = jt;
      }
    j["entries"].push_back(je);
  }
  return j.dump(1) + "\n";
}

void Database::save_file(const std::string& path) const {
  fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  const std::string tmp = path + fmt::format(".tmp{}", std::chrono::steady_clock::now().time_since_epoch().count());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail("cannot write tuning database '{}'", tmp);
    f << dump();
    if (!f) fail("cannot write tuning database '{}'", tmp);
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    fs::remove(tmp, ec);
    fail("cannot rename tuning database into '{}'", path);
  }
}

Entry& Database::entry_for(const DeviceKey& k) {
  for (auto& e : entries_)
    if (e.device.type == k.type && e.device.vendor == k.vendor && e.device.name == k.name &&
        e.device.driver == k.driver && e.device.library == k.library)
      return e;
  entries_.push_back(Entry{k, {}, 0, {}});
  return entries_.back();
}

// ---- registry ----------------------------------------------------------------------------------------

namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

std::string Registry::user_path() {
  if (const char* f = std::getenv("CLDL_TUNING_FILE"); f && *f) return f;
  return (fs::path(ProgramCache::global().directory()) / "tuning.json").string();
}

Registry::Registry() { reload(); }

Registry& Registry::global() {
  static Registry r;
  return r;
}

void Registry::reload() {
  std::vector<Database> dbs;
  const std::string user = user_path();
  try {
    dbs.push_back(Database::load_file(user));
  } catch (const Error& e) {
    // A broken user file must not stop every model from running; say so loudly and use the shipped ones.
    log::warn("ignoring the user tuning database: {}", e.what());
  }
  for (size_t i = 0; i < detail::kEmbeddedTuningCount; ++i)
    if (detail::kEmbeddedTuning[i].name)
      dbs.push_back(Database::parse(detail::kEmbeddedTuning[i].text,
                                    fmt::format("shipped tuning/{}", detail::kEmbeddedTuning[i].name)));
  std::lock_guard lock(registry_mutex());
  dbs_ = std::move(dbs);
}

void Registry::set(std::vector<Database> dbs) {
  std::lock_guard lock(registry_mutex());
  dbs_ = std::move(dbs);
}

const std::vector<Database>& Registry::databases() const { return dbs_; }

std::optional<Match> Registry::lookup(const DeviceInfo& info, std::string_view family, std::string_view problem) const {
  const DeviceKey dev = device_key(info);
  std::lock_guard lock(registry_mutex());
  int best_level = 99;
  std::optional<Match> best;
  for (const auto& db : dbs_)  // user first: at equal level the earlier database wins
    for (const auto& e : db.entries()) {
      const int level = match_level(e.device, dev);
      if (level < 0 || level >= best_level) continue;
      auto f = e.kernels.find(std::string(family));
      if (f == e.kernels.end()) continue;
      auto p = f->second.find(std::string(problem));
      if (p == f->second.end()) continue;
      best_level = level;
      best = Match{p->second, fmt::format("{} ({})", db.origin(), level_name(level))};
    }
  return best;
}

std::vector<std::pair<std::string, Match>> Registry::resolve_all(const DeviceInfo& info) const {
  std::set<std::pair<std::string, std::string>> keys;
  {
    const DeviceKey dev = device_key(info);
    std::lock_guard lock(registry_mutex());
    for (const auto& db : dbs_)
      for (const auto& e : db.entries())
        if (match_level(e.device, dev) >= 0)
          for (const auto& [family, problems] : e.kernels)
            for (const auto& [problem, t] : problems) keys.insert({family, problem});
  }
  std::vector<std::pair<std::string, Match>> out;
  for (const auto& [family, problem] : keys)
    if (auto m = lookup(info, family, problem)) out.push_back({family + " " + problem, *m});
  return out;
}

bool enabled() { return g_enabled.load(); }
void set_enabled(bool on) { g_enabled.store(on); }

std::optional<Tuned> find(const DeviceInfo& info, std::string_view family, std::string_view problem) {
  if (!enabled()) {
    log::debug("tuning {} [{}] on {}: database off, heuristic default", family, problem, info.name);
    return std::nullopt;
  }
  auto m = Registry::global().lookup(info, family, problem);
  if (!m) {
    log::debug("tuning {} [{}] on {}: no entry, heuristic default", family, problem, info.name);
    return std::nullopt;
  }
  log::debug("tuning {} [{}] on {}: {} from {}", family, problem, info.name, to_string(m->tuned.params), m->source);
  return m->tuned;
}

// ---- search --------------------------------------------------------------------------------------------

double Space::size() const {
  double n = 1;
  for (const auto& d : dims) n *= double(d.values.size());
  return n;
}

std::string compare_results(const std::vector<float>& out, const std::vector<float>& ref, float rtol, float atol) {
  if (out.size() != ref.size()) return fmt::format("result has {} values, the reference {}", out.size(), ref.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const float d = std::fabs(out[i] - ref[i]);
    if (!(d <= atol + rtol * std::fabs(ref[i])))  // also catches NaN
      return fmt::format("value {} is {}, the reference {}", i, out[i], ref[i]);
  }
  return {};
}

SearchResult search(const Space& space, const std::function<std::string(const Params&)>& invalid,
                    const std::function<Evaluation(const Params&)>& evaluate, const std::vector<float>& reference,
                    const SearchOptions& o, const std::optional<Params>& start) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  SearchResult res;
  std::set<Params> seen;
  std::mt19937_64 rng(o.seed);
  const bool exhaustive = space.size() <= o.exhaustive_limit;
  size_t planned = exhaustive ? size_t(space.size()) : size_t(o.random_samples) + 1;
  auto out_of_time = [&] { return (o.stop && o.stop->load()) || elapsed() >= o.budget_s; };

  // Tries one candidate; false when the search must end.
  auto attempt = [&](const Params& p) {
    if (!seen.insert(p).second) return true;
    if (out_of_time()) {
      res.interrupted = true;
      return false;
    }
    if (std::string why = invalid(p); !why.empty()) {
      ++res.skipped_invalid;
      log::debug("tune: skip {} ({})", to_string(p), why);
      return true;
    }
    Evaluation ev;
    try {
      ev = evaluate(p);
    } catch (const std::exception& e) {
      ev.ok = false;
      ev.error = e.what();
    }
    ++res.evaluated;
    auto note = [&](std::string line) {
      log::debug("tune: {}", line);
      if (res.log.size() < 8) res.log.push_back(std::move(line));
    };
    if (!ev.ok) {
      ++res.failed;
      note(fmt::format("{} failed: {}", to_string(p), ev.error.substr(0, 300)));
    } else if (std::string diff = compare_results(ev.out, reference, o.rtol, o.atol); !diff.empty()) {
      ++res.rejected_wrong;
      note(fmt::format("{} rejected, wrong result: {}", to_string(p), diff));
    } else if (!res.best || ev.ms < res.best_ms) {
      res.best = p;
      res.best_ms = ev.ms;
    }
    if (o.progress) o.progress(res.evaluated + res.skipped_invalid, std::max(planned, seen.size()), res.best_ms);
    return true;
  };

  if (start && !attempt(*start)) return res;
  if (exhaustive) {
    std::vector<size_t> idx(space.dims.size(), 0);
    while (true) {
      Params p;
      for (size_t d = 0; d < space.dims.size(); ++d) p[space.dims[d].name] = space.dims[d].values[idx[d]];
      if (!attempt(p)) return res;
      size_t d = 0;
      for (; d < idx.size(); ++d) {
        if (++idx[d] < space.dims[d].values.size()) break;
        idx[d] = 0;
      }
      if (d == idx.size()) break;
    }
    return res;
  }
  // Random sampling (distinct candidates; invalid ones count as tried so a dense invalid region ends).
  for (int i = 0, tries = 0; i < o.random_samples && tries < o.random_samples * 20; ++tries) {
    Params p;
    for (const auto& d : space.dims) p[d.name] = d.values[std::uniform_int_distribution<size_t>(0, d.values.size() - 1)(rng)];
    if (seen.count(p)) continue;
    ++i;
    if (!attempt(p)) return res;
  }
  // Local refinement: neighbours (one step along one dimension) of the best until none improves.
  while (res.best) {
    const Params centre = *res.best;
    const double before = res.best_ms;
    std::vector<Params> next;
    for (const auto& d : space.dims) {
      auto c = centre.find(d.name);
      if (c == centre.end()) continue;
      auto it = std::find(d.values.begin(), d.values.end(), c->second);
      if (it == d.values.end()) continue;
      for (int step : {-1, 1}) {
        const auto pos = (it - d.values.begin()) + step;
        if (pos < 0 || pos >= std::ptrdiff_t(d.values.size())) continue;
        Params p = centre;
        p[d.name] = d.values[size_t(pos)];
        if (!seen.count(p)) next.push_back(p);
      }
    }
    if (next.empty()) break;
    planned = seen.size() + next.size();
    for (const auto& p : next)
      if (!attempt(p)) return res;
    if (!(res.best_ms < before)) break;
  }
  return res;
}

}  // namespace tuning
}  // namespace cldl
