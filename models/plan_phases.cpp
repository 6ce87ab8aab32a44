// The thread's current plan timing (plan_phases.hpp).
#include "models/plan_phases.hpp"

#include <fmt/format.h>

namespace cldl::graph {

namespace {
thread_local PlanPhases* t_phases = nullptr;
}

PlanPhases* current_plan_phases() { return t_phases; }

PlanPhaseScope::PlanPhaseScope(PlanPhases* p) : saved_(t_phases) { t_phases = p; }
PlanPhaseScope::~PlanPhaseScope() { t_phases = saved_; }

std::string PlanPhases::str() const {
  return fmt::format(
      "copy {:.2f}, infer {:.2f}, fusion {:.2f}, dead {:.2f}, device fold {:.2f}, lowering {:.2f}, memory plan "
      "{:.2f}, constants {:.2f}, compile {:.2f} (lowering, memory plan and constants included); total {:.2f} ms",
      copy_ms, infer_ms, fusion_ms, dead_ms, device_fold_ms, lowering_ms, memory_plan_ms, constants_ms, compile_ms,
      total_ms);
}

}  // namespace cldl::graph
