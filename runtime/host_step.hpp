// Host steps inside a run (NonMaxSuppression's and Unique's on run-time data): the node's kernel reads its
// inputs back, computes on the host and writes its outputs.
#pragma once
#include "runtime/exec_context.hpp"

namespace cldl {

// A host step's start: flushes the queues of the events in ec.wait_for (commands on other queues must be
// submitted before the host blocks), waits for them and clears the list.
void host_step_wait(ExecutionContext& ec);
// A host step's end (its own writes have completed): a marker on ec.queue becomes the step's event.
void host_step_done(ExecutionContext& ec, const char* name);

}  // namespace cldl
