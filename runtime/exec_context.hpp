// What an op needs to enqueue: the queue, the events to wait for, where to put the event it signals,
// and an optional profiler. Scheduling with events is a parameter, never a global.
#pragma once
#include <string>
#include <vector>

#include "runtime/cl.hpp"

namespace cldl {

class Profiler;

struct ExecutionContext {
  cl::CommandQueue queue;
  std::vector<cl::Event> wait_for;  // consumed by the first command enqueued
  cl::Event* signal = nullptr;      // receives the event of the last command enqueued
  Profiler* profiler = nullptr;
  std::string label;  // prefix for profiler records (node name)

  ExecutionContext() = default;
  explicit ExecutionContext(cl::CommandQueue q) : queue(std::move(q)) {}

  // Enqueues a kernel: waits for `wait_for` (then clears it), stores its event in `signal`, records it
  // in the profiler under `name`. Throws Error naming the kernel on failure.
  void enqueue_kernel(const cl::Kernel& k, const cl::NDRange& global, const cl::NDRange& local,
                      const char* name);
  // For libraries that take no wait list (CLBlast, clFFT): makes the queue wait for `wait_for` first.
  void barrier_on_waits();
  // Hands an event produced outside enqueue_kernel (a library call, a copy) to signal and profiler.
  void record(const cl::Event& e, const char* name);
  // Pointer to pass as `cl_event*` out-parameter to library calls: non-null when someone wants it.
  bool wants_event() const { return signal != nullptr || profiler != nullptr; }
  const std::vector<cl::Event>* waits() const { return wait_for.empty() ? nullptr : &wait_for; }
};

// Sets every argument of a kernel in order; errors name the kernel and the argument index.
namespace detail {
void check_arg(int err, const cl::Kernel& k, unsigned index);
}
template <typename... Args>
void set_args(cl::Kernel& k, const Args&... args) {
  unsigned i = 0;
  ((detail::check_arg(k.setArg(i, args), k, i), ++i), ...);
}

// Rounds `n` up to a multiple of `m`.
constexpr size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

}  // namespace cldl
