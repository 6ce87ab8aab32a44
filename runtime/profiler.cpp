// Profiler: resolves OpenCL profiling times and formats Chrome trace JSON.
#include "runtime/profiler.hpp"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/error.hpp"

namespace cldl {

void Profiler::add(std::string name, cl::Event e) {
  std::lock_guard lock(m_);
  pending_.emplace_back(std::move(name), std::move(e));
}

void Profiler::label_queue(const cl::CommandQueue& q, std::string label) {
  std::lock_guard lock(m_);
  queue_labels_[q()] = std::move(label);
}

std::vector<ProfileRecord> Profiler::records() {
  std::lock_guard lock(m_);
  for (auto& [name, ev] : pending_) {
    check(ev.wait(), "clWaitForEvents", name);
    ProfileRecord r;
    r.name = name;
    cl_command_queue q = nullptr;
    clGetEventInfo(ev(), CL_EVENT_COMMAND_QUEUE, sizeof(q), &q, nullptr);
    if (auto it = queue_labels_.find(q); it != queue_labels_.end()) {
      r.queue = it->second;
    } else {
      cl_device_id dev = nullptr;
      clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof(dev), &dev, nullptr);
      r.queue = fmt::format("queue {} (device {})", static_cast<const void*>(q), static_cast<const void*>(dev));
    }
    cl_int e1 = ev.getProfilingInfo(CL_PROFILING_COMMAND_QUEUED, &r.queued_ns);
    cl_int e2 = ev.getProfilingInfo(CL_PROFILING_COMMAND_START, &r.start_ns);
    cl_int e3 = ev.getProfilingInfo(CL_PROFILING_COMMAND_END, &r.end_ns);
    if (e1 != CL_SUCCESS || e2 != CL_SUCCESS || e3 != CL_SUCCESS)
      throw_cl_error(e2 ? e2 : (e1 ? e1 : e3), "clGetEventProfilingInfo",
                     name + " (was the queue created with profiling on?)");
    done_.push_back(std::move(r));
  }
  pending_.clear();
  std::sort(done_.begin(), done_.end(), [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
  return done_;
}

double Profiler::total_ms() {
  double t = 0;
  for (auto& r : records()) t += r.duration_ms();
  return t;
}

void Profiler::clear() {
  std::lock_guard lock(m_);
  pending_.clear();
  done_.clear();
}

std::string Profiler::chrome_trace_json() {
  auto recs = records();
  uint64_t t0 = recs.empty() ? 0 : recs.front().queued_ns;
  for (auto& r : recs) t0 = std::min(t0, r.queued_ns ? r.queued_ns : r.start_ns);
  std::vector<std::string> queues;
  nlohmann::json events = nlohmann::json::array();
  for (auto& r : recs) {
    auto it = std::find(queues.begin(), queues.end(), r.queue);
    int tid = static_cast<int>(it - queues.begin());
    if (it == queues.end()) {
      queues.push_back(r.queue);
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid},
                        {"args", {{"name", r.queue}}}});
    }
    events.push_back({{"name", r.name}, {"ph", "X"}, {"pid", 1}, {"tid", tid},
                      {"ts", (r.start_ns - t0) / 1000.0}, {"dur", (r.end_ns - r.start_ns) / 1000.0},
                      {"args", {{"queued_us", (r.queued_ns >= t0 ? r.queued_ns - t0 : 0) / 1000.0}}}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump(1);
}

void Profiler::write_chrome_trace(const std::string& path) {
  std::ofstream f(path);
  if (!f) fail("cannot write trace file '{}'", path);
  f << chrome_trace_json();
  if (!f) fail("writing trace file '{}' failed", path);
}

}  // namespace cldl
