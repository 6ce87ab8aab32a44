// Context: cl::Context over selected devices, lazily created in-order queues, pools and transfers.
#include "runtime/context.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace cldl {

Context::Context(std::vector<Device> devices) : devices_(std::move(devices)) {
  if (devices_.empty()) fail("Context: no devices given");
  std::vector<cl::Device> cl_devs;
  for (auto& d : devices_) {
    if (d.platform() != devices_[0].platform())
      fail("Context: devices '{}' and '{}' are on different platforms; one context spans one platform",
           devices_[0].info.name, d.info.name);
    cl_devs.push_back(d.device);
  }
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(devices_[0].platform()), 0};
  cl_int err = CL_SUCCESS;
  ctx_ = cl::Context(cl_devs, props, nullptr, nullptr, &err);
  check(err, "clCreateContext", devices_[0].info.name);
  for (auto& d : devices_) pools_.push_back(std::make_unique<MemoryPool>(ctx_, d.info.name, d.info.max_alloc_bytes));
  for (auto& d : devices_) log::info("context device {} '{}' ({})", d.id(), d.info.name, d.info.platform_name);
}

std::shared_ptr<Context> Context::create(std::string_view spec) {
  return std::make_shared<Context>(select_devices(spec));
}

std::shared_ptr<Context> Context::wrap(cl_context ctx, cl_command_queue queue) {
  if (!ctx || !queue) fail("Context::wrap: null cl_context or cl_command_queue");
  std::shared_ptr<Context> c(new Context());
  c->ctx_ = cl::Context(ctx, true);
  cl::CommandQueue q(queue, true);
  cl::Device qdev;
  check(q.getInfo(CL_QUEUE_DEVICE, &qdev), "clGetCommandQueueInfo", "CL_QUEUE_DEVICE");
  cl_command_queue_properties qprops = 0;
  q.getInfo(CL_QUEUE_PROPERTIES, &qprops);
  if (qprops & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
    fail("Context::wrap: the app's queue is out-of-order; cldl needs an in-order queue");
  Device found;
  bool ok = false;
  for (const auto& d : all_devices())
    if (d.device() == qdev()) { found = d; ok = true; }
  if (!ok) {
    cl::Platform plat(qdev.getInfo<CL_DEVICE_PLATFORM>(), true);
    found.platform = plat;
    found.device = qdev;
    found.info = query_device_info(plat, qdev);
  }
  c->devices_.push_back(found);
  c->pools_.push_back(std::make_unique<MemoryPool>(c->ctx_, found.info.name, found.info.max_alloc_bytes));
  c->queues_[{0, 0, (qprops & CL_QUEUE_PROFILING_ENABLE) != 0}] = q;
  c->queues_[{0, 0, !(qprops & CL_QUEUE_PROFILING_ENABLE)}] = q;
  return c;
}

const Device& Context::device(int i) const {
  if (i < 0 || static_cast<size_t>(i) >= devices_.size())
    fail("Context: device index {} out of range (context has {} devices)", i, devices_.size());
  return devices_[i];
}

cl::CommandQueue Context::queue(int d, int index, bool profiling) {
  const Device& dev = device(d);
  std::lock_guard lock(m_);
  auto key = std::make_tuple(d, index, profiling);
  auto it = queues_.find(key);
  if (it != queues_.end()) return it->second;
  cl_int err = CL_SUCCESS;
  cl::CommandQueue q(ctx_, dev.device, profiling ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
  check(err, "clCreateCommandQueue", fmt::format("device {} queue {}", dev.info.name, index));
  queues_.emplace(key, q);
  return q;
}

MemoryPool& Context::pool(int d) {
  device(d);
  return *pools_[d];
}

Tensor Context::alloc(Shape shape, DType dtype, int d) {
  for (auto x : shape.dims)
    if (x < 0) fail("Context::alloc: negative dimension in shape {}", shape.str());
  Tensor t;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.device = d;
  auto [buf, keep] = pool(d).allocate(std::max<size_t>(t.bytes(), 1));
  t.buffer = buf;
  t.keepalive = keep;
  return t;
}

cl::Program Context::program(std::string_view kernel_file, std::string_view options, int d) {
  return ProgramCache::global().get(ctx_, device(d), kernel_file, options);
}

Tensor Context::upload(const HostTensor& h, int d) {
  Tensor t = alloc(h.shape(), h.dtype(), d);
  if (h.bytes()) {
    auto q = queue(d);
    // A blocking write only promises that h may be reused when it returns, not that the write is done
    // (OpenCL 1.2, 5.2.2): Intel's FPGA emulator returns with the command still CL_SUBMITTED, and a
    // kernel on another queue then read the buffer's old contents. Callers use the tensor on any queue,
    // so wait for the write itself.
    cl::Event done;
    check(q.enqueueWriteBuffer(t.buffer, CL_TRUE, t.offset_bytes, h.bytes(), h.data(), nullptr, &done),
          "clEnqueueWriteBuffer", fmt::format("upload of {} {}", to_string(h.dtype()), h.shape().str()));
    check(done.wait(), "clWaitForEvents", fmt::format("upload of {} {}", to_string(h.dtype()), h.shape().str()));
  }
  return t;
}

HostTensor Context::download(const Tensor& t) {
  HostTensor h(t.dtype, t.shape);
  if (h.bytes()) {
    auto q = queue(t.device);
    check(q.enqueueReadBuffer(t.buffer, CL_TRUE, t.offset_bytes, h.bytes(), h.data()), "clEnqueueReadBuffer",
          fmt::format("download of {} {}", to_string(t.dtype), t.shape.str()));
  }
  return h;
}

void Context::write_async(const Tensor& dst, const void* src, size_t bytes, ExecutionContext& ec) {
  if (bytes > dst.bytes()) fail("write_async: {} bytes into a tensor of {} bytes", bytes, dst.bytes());
  cl::Event ev;
  check(ec.queue.enqueueWriteBuffer(dst.buffer, CL_FALSE, dst.offset_bytes, bytes, src, ec.waits(), &ev),
        "clEnqueueWriteBuffer", ec.label);
  ec.wait_for.clear();
  ec.record(ev, "write");
}

void Context::read_async(const Tensor& src, void* dst, size_t bytes, ExecutionContext& ec) {
  if (bytes > src.bytes()) fail("read_async: {} bytes from a tensor of {} bytes", bytes, src.bytes());
  cl::Event ev;
  check(ec.queue.enqueueReadBuffer(src.buffer, CL_FALSE, src.offset_bytes, bytes, dst, ec.waits(), &ev),
        "clEnqueueReadBuffer", ec.label);
  ec.wait_for.clear();
  ec.record(ev, "read");
}

void Context::copy_async(const Tensor& src, const Tensor& dst, ExecutionContext& ec) {
  if (src.bytes() != dst.bytes()) fail("copy_async: {} bytes into {} bytes", src.bytes(), dst.bytes());
  if (src.bytes() == 0) return;
  cl::Event ev;
  check(ec.queue.enqueueCopyBuffer(src.buffer, dst.buffer, src.offset_bytes, dst.offset_bytes, src.bytes(), ec.waits(), &ev),
        "clEnqueueCopyBuffer", ec.label);
  ec.wait_for.clear();
  ec.record(ev, "copy");
}

void Context::finish() {
  std::lock_guard lock(m_);
  for (auto& [k, q] : queues_) check(q.finish(), "clFinish");
}

void Context::flush() {
  std::lock_guard lock(m_);
  for (auto& [k, q] : queues_) check(q.flush(), "clFlush");
}

}  // namespace cldl
