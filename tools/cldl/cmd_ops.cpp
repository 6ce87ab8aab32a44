// `cldl ops`: the ops cldl implements, read from the op registry (models/ops_*.cpp register them): type,
// domain, the opset range and the family. --markdown prints docs/ops.md, which a test keeps equal to it.
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

void run_ops(bool markdown, bool json) {
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
  if (markdown) {
    std::string s =
        "# Ops\n\n"
        "Every op cldl implements, with the opsets whose semantics it follows (`7+`: opset 7 and every later one;\n"
        "versions in between that changed the op are handled by its implementation) and its family. Generated\n"
        "from the op registry by `cldl ops --markdown`; the `opsets` test checks that this file is current.\n"
        "Conformance results per op: docs/conformance.md.\n\n"
        "| op | domain | opsets | family |\n| --- | --- | --- | --- |\n";
    for (auto* d : ops) s += fmt::format("| {} | {} | {} | {} |\n", d->type, domain(d), opsets(*d), d->family);
    std::fputs(s.c_str(), stdout);
    return;
  }
  std::printf("%-24s %-10s %-8s %s\n", "op", "domain", "opsets", "family");
  for (auto* d : ops)
    std::printf("%-24s %-10s %-8s %s\n", d->type.c_str(), domain(d).c_str(), opsets(*d).c_str(), d->family.c_str());
}

}  // namespace

void add_ops_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ops", "List the ops cldl implements with their opset ranges (from the op registry)");
  static bool markdown = false, json = false;
  cmd->add_flag("--markdown", markdown, "Print the Markdown table of docs/ops.md");
  cmd->add_flag("--json", json, "Print JSON");
  cmd->callback([] { run_ops(markdown, json); });
}

}  // namespace cldl::cli
