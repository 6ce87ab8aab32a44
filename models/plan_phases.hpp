// Where a plan's time goes, phase by phase: Model::plan_cache_stats().last_plan_phases, Python's
// m.plan_cache["last_plan_phases"], tools/bench/plan_cost.py, and a CLDL_LOG=debug line per plan.
//
// Model::make_plan installs a PlanPhases for its thread (PlanPhaseScope); the passes and the lowering add
// their wall time to it through PhaseTimer, and do nothing when no plan is being timed (a fixed-shape
// compile, the tests).
#pragma once
#include <chrono>
#include <string>

namespace cldl::graph {

struct PlanPhases {
  double copy_ms = 0;         // the model's graph copied for this signature, inputs bound
  double infer_ms = 0;        // shape inference with host folding of the shape subgraphs (every round)
  double fusion_ms = 0;       // the typed, structure and late fusion passes (sort included)
  double dead_ms = 0;         // dead-node removal
  double device_fold_ms = 0;  // constant subgraphs folded on the device
  double lowering_ms = 0;     // ops created: algorithm choice, programs from the cache, weights prepared
  double memory_plan_ms = 0;  // liveness and offsets
  double constants_ms = 0;    // the plan's own constants written to the device and waited for
  double compile_ms = 0;      // all of CompiledModel::compile (lowering and memory plan included)
  double total_ms = 0;        // the plan, as last_plan_ms
  std::string str() const;    // "copy 0.10, infer 3.10, ...; total 9.80 ms"
};

// The phases of the plan being made on this thread, or null.
PlanPhases* current_plan_phases();

// Times this thread's plan into `p` (null: times nothing, e.g. a nested compile that must not count)
// until it goes out of scope; scopes nest.
class PlanPhaseScope {
 public:
  explicit PlanPhaseScope(PlanPhases* p);
  ~PlanPhaseScope();
  PlanPhaseScope(const PlanPhaseScope&) = delete;
  PlanPhaseScope& operator=(const PlanPhaseScope&) = delete;

 private:
  PlanPhases* saved_;
};

// Adds the wall time of its scope to one field of the current plan's phases, if a plan is being timed.
class PhaseTimer {
 public:
  explicit PhaseTimer(double PlanPhases::*field)
      : phases_(current_plan_phases()), field_(field), t0_(phases_ ? Clock::now() : Clock::time_point{}) {}
  ~PhaseTimer() {
    if (phases_) phases_->*field_ += std::chrono::duration<double, std::milli>(Clock::now() - t0_).count();
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  PlanPhases* phases_;
  double PlanPhases::*field_;
  Clock::time_point t0_;
};

}  // namespace cldl::graph
