// `cldl ops`: the ops cldl implements, read from the op registry (models/ops_*.cpp register them): type,
// domain, the opset range and the family. docs/ops.md, the same with each op's conformance results, is
// written by the conformance suite (tests/support/ops_table.hpp).
#include <algorithm>
#include <cstdio>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "models/op_registry.hpp"
#include "models/passes.hpp"
#include "tools/cldl/commands.hpp"

namespace cldl::cli {
namespace {

std::string opsets(const graph::OpDef& d) {
  return d.until == 0 ? fmt::format("{}+", d.since) : fmt::format("{}-{}", d.since, d.until);
}

void run_ops(bool json) {
  auto ops = graph::registered_ops();
  // Nodes only fusion passes make (FusedElementwise) are not ops a model can name.
  std::erase_if(ops, [](auto* d) { return d->domain == graph::kFusedDomain; });
  std::sort(ops.begin(), ops.end(),
            [](auto* a, auto* b) { return std::tie(a->domain, a->type) < std::tie(b->domain, b->type); });
  auto domain = [](const graph::OpDef* d) { return d->domain.empty() ? std::string("ai.onnx") : d->domain; };
  if (json) {
    nlohmann::json arr = nlohmann::json::array();
    for (auto* d : ops)
      arr.push_back(
          {{"op", d->type}, {"domain", domain(d)}, {"since", d->since}, {"until", d->until}, {"family", d->family}});
    std::puts(nlohmann::json{{"ops", arr}}.dump(2).c_str());
    return;
  }
  std::printf("%-24s %-10s %-8s %s\n", "op", "domain", "opsets", "family");
  for (auto* d : ops)
    std::printf("%-24s %-10s %-8s %s\n", d->type.c_str(), domain(d).c_str(), opsets(*d).c_str(), d->family.c_str());
}

}  // namespace

void add_ops_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ops", "List the ops cldl implements with their opset ranges (from the op registry)");
  static bool json = false;
  cmd->add_flag("--json", json, "Print JSON");
  cmd->callback([] { run_ops(json); });
}

}  // namespace cldl::cli
