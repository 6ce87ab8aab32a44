// `cldl bench attention` with stand-in peers (tools/cldl/bench_peer.cpp): a python script that speaks the
// serve protocol of tools/bench/peer_serve.py with known times, one that dies after its first run, one
// that never becomes ready, and a missing one. The bench must time the peer round by round, report its
// rows and per-round ratios from those answers, and never hang or fail because of a broken peer.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/test_util.hpp"

namespace {

namespace fs = std::filesystem;

// A serve-mode stand-in: every case id on its command line (BxSxHxDxCAUSAL) answers `run` with `ms`;
// after `runs_before_exit` answers (-1: never) it exits; `ready` = false: it exits before the ready line.
std::string write_peer(const std::string& dir, const std::string& name, double ms, int runs_before_exit, bool ready) {
  const std::string path = dir + "/" + name;
  std::ofstream f(path);
  f << "import json, re, sys\n"
    << "cases = [a for a in sys.argv[1:] if re.fullmatch(r'\\d+x\\d+x\\d+x\\d+x\\d', a)]\n"
    << (ready ? "" : "sys.exit(4)\n")
    << "print(json.dumps({'ready': True, 'cases': cases, 'notes': {c: 'stand-in' for c in cases}}), flush=True)\n"
    << "left = " << runs_before_exit << "\n"
    << "for line in iter(sys.stdin.readline, ''):\n"
    << "    w = line.split()\n"
    << "    if w and w[0] == 'quit':\n"
    << "        break\n"
    << "    if left == 0:\n"
    << "        sys.exit(3)\n"
    << "    left -= 1\n"
    << "    print(json.dumps({'case': w[1], 'ms': " << ms << ", 'cpu_ms': 1.0}), flush=True)\n";
  return path;
}

// The JSON rows of one bench run (its exit status in rc).
std::vector<nlohmann::json> bench_rows(const std::string& script, int runs, int& rc, std::string& out) {
  rc = cldl::test::run_command("CLDL_LOG=warn " + std::string(CLDL_CLI_PATH) + " bench attention --device " + cldl::test::device_spec() +
                                   " --filter 'B=1 S=512' --runs " + std::to_string(runs) +
                                   " --warmup 1 --json --set plain=0 --set ort_script=" + script,
                               out);
  std::vector<nlohmann::json> rows;
  size_t at = 0;
  while (at < out.size()) {
    size_t end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    const std::string line = out.substr(at, end - at);
    if (!line.empty() && line[0] == '{') rows.push_back(nlohmann::json::parse(line));
    at = end + 1;
  }
  return rows;
}

const nlohmann::json* row_of(const std::vector<nlohmann::json>& rows, const std::string& impl) {
  for (const auto& r : rows)
    if (r.value("impl", "") == impl) return &r;
  return nullptr;
}

}  // namespace

TEST_SUITE("bench") {

TEST_CASE("bench attention times a serve-mode peer round by round and survives broken ones") {
  const std::string dir = cldl::test::temp_dir("bench-peer");
  int rc = 0;
  std::string out;
  SUBCASE("a working peer: its row holds its answers, the ratio is per round") {
    auto rows = bench_rows(write_peer(dir, "good.py", 1000.0, -1, true), 3, rc, out);
    INFO(out);
    REQUIRE(rc == 0);
    const nlohmann::json* fused = row_of(rows, "cldl:fused");
    const nlohmann::json* peer = row_of(rows, "onnxruntime");
    REQUIRE(fused);
    REQUIRE(peer);
    CHECK((*peer)["runs"] == 3);
    CHECK((*peer)["min_ms"].get<double>() == doctest::Approx(1000.0));
    CHECK((*peer)["median_ms"].get<double>() == doctest::Approx(1000.0));
    CHECK((*peer)["round_ratio_rounds"] == 3);
    CHECK((*peer)["round_ratio_of"] == "ORT/fused");
    // Each round's ratio is 1000 ms over that round's fused time, so their median lies between
    // 1000 / (the slowest fused run) and 1000 / (the fastest).
    const double lo = 1000.0 / (*fused)["max_ms"].get<double>(), hi = 1000.0 / (*fused)["min_ms"].get<double>();
    CHECK((*peer)["round_ratio_median"].get<double>() >= lo * 0.999);
    CHECK((*peer)["round_ratio_median"].get<double>() <= hi * 1.001);
    CHECK((*peer)["note"].get<std::string>().find("stand-in") != std::string::npos);
  }
  SUBCASE("a peer that dies after its first answer (the warm-up round's): no peer rows, the bench goes on") {
    auto rows = bench_rows(write_peer(dir, "dies.py", 5.0, 1, true), 2, rc, out);
    INFO(out);
    CHECK(rc == 0);
    CHECK(row_of(rows, "cldl:fused"));
    CHECK_FALSE(row_of(rows, "onnxruntime"));
    CHECK(out.find("dies.py: closed its output (exited with status 3)") != std::string::npos);
  }
  SUBCASE("a peer that never becomes ready, and a missing script: the cldl rows alone") {
    const std::pair<std::string, std::string> peers[] = {
        {write_peer(dir, "silent.py", 5.0, -1, false), "silent.py: closed its output (exited with status 4)"},
        {dir + "/missing.py", "missing.py' not found"}};
    for (const auto& [script, warning] : peers) {
      CAPTURE(script);
      auto rows = bench_rows(script, 2, rc, out);
      INFO(out);
      CHECK(rc == 0);
      CHECK(row_of(rows, "cldl:fused"));
      CHECK_FALSE(row_of(rows, "onnxruntime"));
      CHECK(out.find(warning) != std::string::npos);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("bench rnn kernel_dir_b: every strategy again on kernels from another directory, with per-round B/A") {
  const std::string dir = cldl::test::temp_dir("bench-kdir");
  // The embedded kernels, rnn.cl with one more line (another source, so another program).
  for (const std::string& f : cldl::kernel_files()) {
    std::ofstream out(dir + "/" + f);
    out << cldl::kernel_source(f) << (f == "rnn.cl" ? "\n// variant B\n" : "");
  }
  const std::string cmd = "CLDL_LOG=warn " + std::string(CLDL_CLI_PATH) + " bench rnn --device " +
                          cldl::test::device_spec() + " --runs 2 --warmup 1 --no-compare --json " +
                          "--set case=6,3,5,7,2 --set strategies=seq,time --set kernel_dir_b=";
  std::string out;
  REQUIRE(cldl::test::run_command(cmd + dir, out) == 0);
  INFO(out);
  std::vector<nlohmann::json> rows;
  for (size_t at = 0, end; at < out.size(); at = end + 1) {
    end = std::min(out.find('\n', at), out.size());
    if (out[at] == '{') rows.push_back(nlohmann::json::parse(out.substr(at, end - at)));
  }
  for (const char* impl : {"cldl:sequential", "cldl:time_parallel"}) {
    const nlohmann::json* a = row_of(rows, impl);
    const nlohmann::json* b = row_of(rows, std::string(impl) + "@B");
    REQUIRE(a);
    REQUIRE(b);
    CHECK(a->value("note", "").find("B/A") == std::string::npos);
    CHECK(b->value("note", "").find("per-round ratio B/A median") != std::string::npos);
    CHECK(b->value("note", "").find(dir) != std::string::npos);
  }
  // A directory without the kernels: the error names the file and the directory.
  const std::string empty = cldl::test::temp_dir("bench-kdir-empty");
  CHECK(cldl::test::run_command(cmd + empty, out) != 0);
  CHECK(out.find("rnn.cl") != std::string::npos);
  CHECK(out.find(empty) != std::string::npos);
}

}  // TEST_SUITE
