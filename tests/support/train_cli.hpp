// What the training tests read from `cldl train --json`.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cldl::test {

// Every step's loss, epoch after epoch, from `cldl train --json`'s output (log lines before the JSON object are
// skipped).
inline std::vector<float> cli_step_losses(const std::string& out) {
  std::vector<float> r;
  const size_t at = out.find("{\"");
  if (at == std::string::npos) return r;
  const nlohmann::json j = nlohmann::json::parse(out.substr(at));
  for (auto& e : j.at("epochs"))
    for (auto& l : e.at("step_losses")) r.push_back(l.get<float>());
  return r;
}

}  // namespace cldl::test
