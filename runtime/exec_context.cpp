// ExecutionContext: kernel enqueue with wait lists, signal events and profiling in one place.
#include "runtime/exec_context.hpp"

#include "runtime/error.hpp"
#include "runtime/profiler.hpp"

namespace cldl {

namespace detail {
void check_arg(int err, const cl::Kernel& k, unsigned index) {
  if (err != CL_SUCCESS) {
    std::string name;
    k.getInfo(CL_KERNEL_FUNCTION_NAME, &name);
    throw_cl_error(err, "clSetKernelArg", fmt::format("kernel {} argument {}", name.c_str(), index));
  }
}
}  // namespace detail

void ExecutionContext::enqueue_kernel(const cl::Kernel& k, const cl::NDRange& global, const cl::NDRange& local,
                                      const char* name) {
  cl::Event ev;
  cl_int err = queue.enqueueNDRangeKernel(k, cl::NullRange, global, local, waits(), wants_event() ? &ev : nullptr);
  if (err != CL_SUCCESS) {
    std::string fn;
    k.getInfo(CL_KERNEL_FUNCTION_NAME, &fn);
    std::string dims;
    for (size_t i = 0; i < global.dimensions(); ++i) dims += fmt::format("{}{}", i ? "x" : "", global.get()[i]);
    if (local.dimensions()) {
      dims += " local ";
      for (size_t i = 0; i < local.dimensions(); ++i) dims += fmt::format("{}{}", i ? "x" : "", local.get()[i]);
    }
    throw_cl_error(err, "clEnqueueNDRangeKernel", fmt::format("{} ({}) global {}", name, fn.c_str(), dims));
  }
  wait_for.clear();
  if (wants_event()) record(ev, name);
}

void ExecutionContext::barrier_on_waits() {
  if (wait_for.empty()) return;
  check(queue.enqueueBarrierWithWaitList(&wait_for, nullptr), "clEnqueueBarrierWithWaitList", label);
  wait_for.clear();
}

void ExecutionContext::record(const cl::Event& e, const char* name) {
  if (signal) *signal = e;
  if (profiler) profiler->add(label.empty() ? std::string(name) : label + "/" + name, e);
}

}  // namespace cldl
