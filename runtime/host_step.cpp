// Host steps inside a run (see host_step.hpp).
#include "runtime/host_step.hpp"

#include "runtime/error.hpp"

namespace cldl {

void host_step_wait(ExecutionContext& ec) {
  for (auto& e : ec.wait_for) {
    cl::CommandQueue q;
    if (e.getInfo(CL_EVENT_COMMAND_QUEUE, &q) == CL_SUCCESS && q() != nullptr) check(q.flush(), "clFlush", ec.label);
  }
  if (!ec.wait_for.empty()) check(cl::Event::waitForEvents(ec.wait_for), "clWaitForEvents", ec.label);
  ec.wait_for.clear();
  // What its own queue ran before it: the executor lists no events of the step's own (in-order) queue.
  check(ec.queue.finish(), "clFinish", ec.label);
}

void host_step_done(ExecutionContext& ec, const char* name) {
  cl::Event marker;
  check(ec.queue.enqueueMarkerWithWaitList(nullptr, &marker), "clEnqueueMarkerWithWaitList", ec.label);
  ec.record(marker, name);
}

}  // namespace cldl
