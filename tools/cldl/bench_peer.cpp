// Peers spoken to by lines (bench.hpp): PeerProcess spawns a child with its stdin and stdout on pipes and
// reads its JSON lines with a timeout; ServePeer drives a serve-mode ONNX Runtime script
// (tools/bench/*_onnxruntime.py --serve) for the benches that time the peer round by round (rnn,
// attention); RoundRatio is the per-round ratio they report.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "runtime/log.hpp"
#include "tools/cldl/bench.hpp"

extern char** environ;

namespace cldl::bench {

std::string RoundRatio::describe() const {
  if (rounds == 0) return fmt::format("per-round ratio {}: no round with both times", label);
  return fmt::format("per-round ratio {} median {:.2f}x (min {:.2f}x, max {:.2f}x) over {} round{}", label, median,
                     min, max, rounds, rounds == 1 ? "" : "s");
}

RoundRatio round_ratio(const std::vector<double>& num, const std::vector<double>& den, std::string label) {
  std::vector<double> r;
  for (size_t i = 0; i < std::min(num.size(), den.size()); ++i)
    if (num[i] > 0 && den[i] > 0) r.push_back(num[i] / den[i]);
  RoundRatio out;
  out.label = std::move(label);
  const Stats s = summarize(r);
  out.median = s.median_ms, out.min = s.min_ms, out.max = s.max_ms, out.rounds = s.runs;
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return "stopped";
}

// Waits up to `grace` for `pid` to end; SIGKILL and a blocking wait after that. Returns its status.
int reap(pid_t pid, std::chrono::milliseconds grace) {
  int status = 0;
  const auto deadline = Clock::now() + grace;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return 0;  // not our child any more (reaped elsewhere): nothing to wait for
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

PeerProcess::PeerProcess(const std::vector<std::string>& argv, std::string label, double timeout_s)
    : label_(std::move(label)), timeout_s_(timeout_s) {
  if (argv.empty()) return;
  int in[2] = {-1, -1}, out[2] = {-1, -1};  // [0] read end, [1] write end; close-on-exec in this process
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
    log::warn("bench peer {}: pipe: {}", label_, std::strerror(errno));
    for (int fd : {in[0], in[1], out[0], out[1]})
      if (fd >= 0) close(fd);
    return;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  if (log::level() < log::Level::debug)
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  // The child starts with no blocked signals and SIGPIPE at its default, whatever this process has set.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, pipe_only;
  sigemptyset(&none);
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &pipe_only);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    log::warn("bench peer {}: cannot start {}: {}", label_, argv[0], std::strerror(rc));
    close(in[1]);
    close(out[0]);
    return;
  }
  pid_ = pid;
  to_child_ = in[1];
  from_child_ = out[0];
}

PeerProcess::~PeerProcess() { stop(); }

void PeerProcess::stop() {
  if (to_child_ >= 0) {
    if (pid_ > 0) write_line("quit");
    close(to_child_);  // EOF on its stdin: the serve loop ends even if "quit" did not arrive
    to_child_ = -1;
  }
  if (pid_ > 0) {
    reap(pid_, std::chrono::milliseconds(2000));
    pid_ = -1;
  }
  if (from_child_ >= 0) {
    close(from_child_);
    from_child_ = -1;
  }
  buffer_.clear();
}

void PeerProcess::fail(const std::string& why) {
  log::warn("bench peer {}: {}; no more peer runs from it", label_, why);
  stop();
}

bool PeerProcess::write_line(const std::string& line) {
  if (to_child_ < 0) return false;
  // A child that has gone away turns the write into EPIPE, not a SIGPIPE that would end this process:
  // SIGPIPE is blocked in this thread around the write and a pending one taken back before unblocking.
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  const std::string data = line + "\n";
  size_t done = 0;
  bool ok = true;
  while (done < data.size()) {
    const ssize_t n = write(to_child_, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    done += size_t(n);
  }
  if (!ok && errno == EPIPE) {
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE)) {
      const timespec zero{0, 0};
      sigtimedwait(&pipe_only, nullptr, &zero);
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

std::optional<nlohmann::json> PeerProcess::read_json(double timeout_s) {
  if (timeout_s < 0) timeout_s = timeout_s_;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  for (;;) {
    for (size_t nl; (nl = buffer_.find('\n')) != std::string::npos;) {
      const std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object()) return j;
    }
    if (pid_ <= 0 || from_child_ < 0) return std::nullopt;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      fail(fmt::format("no answer within {:.0f} s", timeout_s));
      return std::nullopt;
    }
    pollfd p{from_child_, POLLIN, 0};
    const int r = poll(&p, 1, int(std::min<long long>(left, INT_MAX)));
    if (r < 0 && errno != EINTR) {
      fail(fmt::format("poll: {}", std::strerror(errno)));
      return std::nullopt;
    }
    if (r <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(from_child_, chunk, sizeof chunk);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      // Closed stdout: the child has ended or is ending; reap it to say how.
      const int status = reap(pid_, std::chrono::milliseconds(2000));
      pid_ = -1;
      fail(n < 0 ? fmt::format("read: {}", std::strerror(errno)) : "closed its output (" + describe_status(status) + ")");
      return std::nullopt;
    }
    buffer_.append(chunk, size_t(n));
  }
}

std::optional<nlohmann::json> PeerProcess::request(const std::string& line, double timeout_s) {
  if (pid_ <= 0) return std::nullopt;
  if (!write_line(line)) {
    fail(fmt::format("cannot write to it: {}", std::strerror(errno)));
    return std::nullopt;
  }
  return read_json(timeout_s);
}

ServePeer::ServePeer(const std::string& script, std::vector<std::string> args) {
  if (script.empty() || !std::filesystem::exists(script)) {
    log::warn("bench peer: script '{}' not found", script);
    return;
  }
  std::vector<std::string> argv{"python3", script};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back("--serve");
  proc_.emplace(argv, script);
  if (!proc_->ok()) proc_.reset();
}

bool ServePeer::ready() {
  if (!waited_ && proc_) {
    waited_ = true;
    // Its start-up builds and warms every case: allow for slow ones on a busy machine.
    auto j = proc_->read_json(900);
    if (j && j->contains("ready") && (*j)["ready"] == true && j->contains("cases") && (*j)["cases"].is_array())
      ready_ = std::move(j);
    else if (proc_->ok())
      log::warn("bench peer {}: no ready line (got {})", proc_->label(), j ? j->dump() : "nothing");
    if (!ready_) proc_.reset();
  }
  return ready_.has_value() && proc_ && proc_->ok();
}

bool ServePeer::has(const std::string& case_id) {
  if (!ready()) return false;
  const auto& cases = (*ready_)["cases"];
  return std::find(cases.begin(), cases.end(), case_id) != cases.end();
}

std::string ServePeer::note(const std::string& case_id) {
  if (!ready_ || !ready_->contains("notes")) return {};
  const auto& notes = (*ready_)["notes"];
  return notes.contains(case_id) && notes[case_id].is_string() ? notes[case_id].get<std::string>() : std::string();
}

std::optional<ServePeer::Run> ServePeer::run(const std::string& case_id) {
  if (!has(case_id)) return std::nullopt;
  auto j = proc_->request("run " + case_id);
  std::optional<Run> out;
  if (j && j->contains("case") && (*j)["case"] == case_id && j->contains("ms") && (*j)["ms"].is_number()) {
    const auto& cpu = j->contains("cpu_ms") ? (*j)["cpu_ms"] : nlohmann::json();
    out = Run{(*j)["ms"].get<double>(), cpu.is_number() ? cpu.get<double>() : 0.0};
  } else if (j) {
    log::warn("bench peer {}: unexpected answer to 'run {}': {}", proc_->label(), case_id, j->dump());
  }
  return out;
}

void PeerRounds::add(const std::optional<ServePeer::Run>& r) {
  ms.push_back(r ? r->ms : 0.0);
  cpu_ms.push_back(r ? r->cpu_ms : 0.0);
}

std::optional<Result> PeerRounds::row(const std::string& family, const std::string& name, double work,
                                      const std::string& peer_note, const std::vector<double>& ours_ms,
                                      const std::string& label) const {
  std::vector<double> got_ms, got_cpu;  // the rounds where the peer gave a time
  for (size_t k = 0; k < ms.size(); ++k)
    if (ms[k] > 0) got_ms.push_back(ms[k]), got_cpu.push_back(cpu_ms[k]);
  if (got_ms.empty()) return std::nullopt;
  Result r;
  r.family = family, r.name = name, r.impl = "onnxruntime";
  r.wall = summarize(got_ms);
  r.work = work;
  r.note = fmt::format("{}{}cpu {:.1f} ms/run (median)", peer_note, peer_note.empty() ? "" : "; ",
                       summarize(got_cpu).median_ms);
  r.round_ratio = round_ratio(ms, ours_ms, label);
  return r;
}

void warm_for(const std::function<void()>& fn, double ms) {
  const auto t0 = Clock::now();
  do fn();
  while (std::chrono::duration<double, std::milli>(Clock::now() - t0).count() < ms);
}

}  // namespace cldl::bench
