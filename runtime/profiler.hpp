// Records every enqueued command's queued / start / end times and writes Chrome trace JSON.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cl.hpp"

namespace cldl {

struct ProfileRecord {
  std::string name;
  std::string queue;  // label of the queue it ran on
  uint64_t queued_ns = 0, start_ns = 0, end_ns = 0;
  double duration_ms() const { return (end_ns - start_ns) * 1e-6; }
};

// Profiling needs queues created with profiling on (Context::queue(..., profiling=true)).
class Profiler {
 public:
  void add(std::string name, cl::Event e);
  // Names a queue's track (e.g. "device 1 queue 0"); unnamed queues show their handle and device.
  void label_queue(const cl::CommandQueue& q, std::string label);
  // Waits for the recorded events and resolves their times; records are sorted by start.
  std::vector<ProfileRecord> records();
  double total_ms();  // sum of kernel durations
  void clear();
  // Chrome trace format (Perfetto, chrome://tracing): one "X" event per command, one track per queue.
  std::string chrome_trace_json();
  void write_chrome_trace(const std::string& path);

 private:
  std::mutex m_;
  std::vector<std::pair<std::string, cl::Event>> pending_;
  std::vector<ProfileRecord> done_;
  std::map<cl_command_queue, std::string> queue_labels_;
};

}  // namespace cldl
