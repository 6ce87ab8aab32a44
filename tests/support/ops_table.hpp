// docs/ops.md, the op table: every op of the registry (but kFusedDomain's, which no model names) with its domain,
// opset range and family, and its ONNX conformance results. The conformance suite renders it from the registry
// and its own run of the conformance data and compares it with the file (tests/test_conformance.cpp); the
// opsets suite checks the registry's columns, which need no conformance data (tests/test_opsets.cpp).
#pragma once
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "models/op_registry.hpp"
#include "models/passes.hpp"

namespace cldl::test {

// What writes docs/ops.md from the registry and a conformance run.
inline const char* const kWriteOpsTable = "CLDL_WRITE_OPS_TABLE=1 build/tests/cldl_tests -ts=conformance";

// The conformance tests whose model uses one op: how many, how many pass, and the others by the tag of their
// line in tests/conformance_gaps/ ("unsupported" for a test of an op cldl does not claim, "FAIL" for a failure).
struct OpConformance {
  int pass = 0, total = 0;
  std::map<std::string, int> not_passing;
};

// The table's ops, by domain and then type.
inline std::vector<const graph::OpDef*> table_ops() {
  auto ops = graph::registered_ops();
  std::erase_if(ops, [](auto* d) { return d->domain == graph::kFusedDomain; });
  std::sort(ops.begin(), ops.end(),
            [](auto* a, auto* b) { return std::tie(a->domain, a->type) < std::tie(b->domain, b->type); });
  return ops;
}

// An op's row up to its conformance cell: "| Softmax | ai.onnx | 1+ | softmax |".
inline std::string ops_table_row(const graph::OpDef& d) {
  const std::string opsets = d.until == 0 ? fmt::format("{}+", d.since) : fmt::format("{}-{}", d.since, d.until);
  return fmt::format("| {} | {} | {} | {} |", d.type, d.domain.empty() ? "ai.onnx" : d.domain, opsets, d.family);
}

inline std::string ops_table(const std::map<std::string, OpConformance>& results) {
  std::string s = fmt::format(
      "# Ops\n\n"
      "Every op of cldl's op registry, with the opsets whose semantics it follows (`7+`: opset 7 and every later\n"
      "one; versions in between that changed the op are handled by its implementation), its family and its ONNX\n"
      "conformance results: pass / total of the tests of `../shared/conformance` (onnx-node, onnx-node-more and\n"
      "onnx-legacy) whose model uses the op, and how many of the others carry each tag of\n"
      "`tests/conformance_gaps/*.txt`, where their reasons are. The ops expanded when planning (If, Loop, Scan,\n"
      "the sequence and optional ops, FlexAttention, Gradient) are not registry ops, so not listed:\n"
      "[conformance.md](conformance.md).\n\n"
      "Generated from the registry and a conformance run; the `conformance` suite fails when this file is not\n"
      "current, and `{}` rewrites it.\n\n"
      "| op | domain | opsets | family | conformance |\n| --- | --- | --- | --- | --- |\n",
      kWriteOpsTable);
  for (const graph::OpDef* d : table_ops()) {
    std::string cell = "no tests";
    if (auto it = results.find(d->type); it != results.end() && it->second.total > 0) {
      const OpConformance& c = it->second;
      cell = fmt::format("{}/{}", c.pass, c.total);
      std::string why;
      for (auto& [tag, n] : c.not_passing) why += fmt::format("{}{} {}", why.empty() ? "" : ", ", n, tag);
      if (!why.empty()) cell += " (" + why + ")";
    }
    s += ops_table_row(*d) + " " + cell + " |\n";
  }
  return s;
}

}  // namespace cldl::test
