// Shared helpers for the doctest suites: one context per process, random data, tolerance checks,
// running child processes.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <doctest/doctest.h>

#include "runtime/cldl.hpp"

namespace cldl::test {

// The device spec the suites run on: CLDL_DEVICE, which ctest sets from CLDL_TEST_DEVICE (cpu, or
// accelerator for an implementation without a CPU device, see tools/test-all-platforms).
inline std::string device_spec() {
  const char* d = std::getenv("CLDL_DEVICE");
  return d && *d ? d : "cpu";
}

// The process-wide test context on the default test device (CLDL_DEVICE, cpu under ctest).
inline Context& ctx() {
  static std::shared_ptr<Context> c = Context::create();
  return *c;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// n uniform integers in [lo, hi] (int, int64_t ...), seeded.
template <typename I>
std::vector<I> random_ints(size_t n, I lo, I hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<I> u(lo, hi);
  std::vector<I> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

inline HostTensor random_tensor(Shape s, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  HostTensor t(DType::f32, s);
  auto v = random_floats(static_cast<size_t>(t.numel()), seed, lo, hi);
  std::copy(v.begin(), v.end(), t.as<float>());
  return t;
}

struct Compare {
  double max_abs = 0, max_rel = 0;
  size_t worst = 0, mismatches = 0;
};

// |got - want| <= atol + rtol * |want| element-wise; reports the worst element on failure.
inline Compare compare(const float* got, const float* want, size_t n, double rtol, double atol) {
  Compare c;
  for (size_t i = 0; i < n; ++i) {
    double d = std::fabs(double(got[i]) - double(want[i]));
    bool bad = !(d <= atol + rtol * std::fabs(double(want[i])));  // NaN counts as a mismatch
    if (bad) c.mismatches++;
    if (d > c.max_abs || bad) {
      if (d > c.max_abs) c.max_abs = d;
      if (bad && c.mismatches == 1) c.worst = i;
    }
    if (std::fabs(want[i]) > 1e-6) c.max_rel = std::max(c.max_rel, d / std::fabs(double(want[i])));
  }
  return c;
}

#define CLDL_CHECK_CLOSE(got_ptr, want_ptr, n, rtol, atol)                                                    \
  do {                                                                                                        \
    auto _c = ::cldl::test::compare((got_ptr), (want_ptr), (n), (rtol), (atol));                              \
    INFO("max abs error " << _c.max_abs << ", first bad index " << _c.worst << " got "                       \
                          << ((n) ? (got_ptr)[_c.worst] : 0) << " want " << ((n) ? (want_ptr)[_c.worst] : 0)); \
    CHECK(_c.mismatches == 0);                                                                                \
  } while (0)

// Runs a shell command, returns exit status and captures stdout+stderr.
// The largest |got - want| of two f32 tensors of one shape; a failed check (naming `what` and the element) where
// one exceeds atol + rtol |want|.
inline double largest_difference(const HostTensor& got, const HostTensor& want, const std::string& what, double atol,
                          double rtol) {
  CAPTURE(what);
  REQUIRE(got.shape() == want.shape());
  double worst = 0;
  for (int64_t k = 0; k < want.numel(); ++k) {
    const double g = got.as<float>()[k], w = want.as<float>()[k], err = std::fabs(g - w);
    worst = std::max(worst, err);
    if (!(err <= atol + rtol * std::fabs(w))) {
      FAIL_CHECK(what << "[" << k << "]: got " << g << ", expected " << w);
      return worst;
    }
  }
  MESSAGE(what << ": largest difference " << worst);
  return worst;
}

inline int run_command(const std::string& cmd, std::string& output) {
  output.clear();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, n);
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// A fresh directory under the system's temporary directory, removed with everything in it when the test
// program exits (also after failed checks, which skip a test's own clean-up).
inline std::string temp_dir(const std::string& tag) {
  struct Registry {
    std::vector<std::filesystem::path> dirs;
    ~Registry() {
      for (const auto& d : dirs) {
        std::error_code ec;
        std::filesystem::remove_all(d, ec);
      }
    }
  };
  static Registry registry;
  const std::filesystem::path t =
      std::filesystem::temp_directory_path() /
      ("cldl-test-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}()));
  std::error_code ec;
  if (!std::filesystem::create_directories(t, ec)) FAIL("cannot create " << t.string() << ": " << ec.message());
  registry.dirs.push_back(t);
  return t.string();
}

// Sets an environment variable for one scope (layers read CLDL_RNN_* and similar at create).
// The previous value (or its absence) comes back at the end.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const char* n, const char* v) : name(n) {
    if (const char* o = std::getenv(n)) old = o;
    setenv(n, v, 1);
  }
  ~ScopedEnv() {
    if (old) setenv(name.c_str(), old->c_str(), 1);
    else unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

// Whether LSTM weights get the tiles layout on device 0 of `cx` (the CPU default, or forced by
// CLDL_RNN_WEIGHT_LAYOUT=tiles): the wavefront strategy needs it, elsewhere it is refused with an error.
inline bool rnn_tiles_layout(Context& cx) {
  const char* lay = std::getenv("CLDL_RNN_WEIGHT_LAYOUT");
  return lay ? std::string(lay) == "tiles" : cx.device(0).info.type != DeviceType::gpu;
}

}  // namespace cldl::test
