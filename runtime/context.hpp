// A context over one or more devices of one platform: in-order queues on request, a memory pool per
// device, program lookup, and host <-> device transfers.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <tuple>
#include <vector>

#include "runtime/cl.hpp"
#include "runtime/device.hpp"
#include "runtime/exec_context.hpp"
#include "runtime/memory.hpp"
#include "runtime/program_cache.hpp"
#include "runtime/tensor.hpp"

namespace cldl {

class Context {
 public:
  // Devices must share a platform (one cl_context spans them).
  explicit Context(std::vector<Device> devices);
  // From a spec (see select_devices): "", "cpu", "cpu:0,cpu:1", "all" ...
  static std::shared_ptr<Context> create(std::string_view spec = {});
  // Adopts an app's context and queue: cldl enqueues on `queue` (queue(d, 0) returns it).
  static std::shared_ptr<Context> wrap(cl_context ctx, cl_command_queue queue);

  const cl::Context& cl() const { return ctx_; }
  size_t device_count() const { return devices_.size(); }
  const Device& device(int i = 0) const;

  // In-order queue `index` of device `d`, created on first request. Profiling queues are separate
  // queues (index space shared), created with CL_QUEUE_PROFILING_ENABLE.
  cl::CommandQueue queue(int d = 0, int index = 0, bool profiling = false);
  ExecutionContext exec(int d = 0, int index = 0, bool profiling = false) { return ExecutionContext(queue(d, index, profiling)); }

  MemoryPool& pool(int d = 0);
  Tensor alloc(Shape shape, DType dtype, int d = 0);

  // Program from kernels/<file> built for device d, through ProgramCache::global().
  cl::Program program(std::string_view kernel_file, std::string_view options = {}, int d = 0);

  // Blocking transfers on queue(d, 0); the tensor upload returns is complete for every queue.
  Tensor upload(const HostTensor& h, int d = 0);
  HostTensor download(const Tensor& t);
  // Asynchronous transfers on ec.queue ordered by ec's wait list/signal. The host memory must stay
  // valid and unchanged until the signalled event completes.
  void write_async(const Tensor& dst, const void* src, size_t bytes, ExecutionContext& ec);
  void read_async(const Tensor& src, void* dst, size_t bytes, ExecutionContext& ec);
  // Device-to-device (or within one device) copy of a whole tensor.
  void copy_async(const Tensor& src, const Tensor& dst, ExecutionContext& ec);
  void finish();  // waits for every queue
  // Submits every queue's commands (clFlush). A command waiting on another queue's event needs that queue
  // flushed (OpenCL 1.2, 5.13): PoCL submits at once, NVIDIA's driver only on a flush or a blocking call.
  void flush();

 private:
  Context() = default;
  cl::Context ctx_;
  std::vector<Device> devices_;
  std::vector<std::unique_ptr<MemoryPool>> pools_;
  std::mutex m_;
  std::map<std::tuple<int, int, bool>, cl::CommandQueue> queues_;
};

}  // namespace cldl
