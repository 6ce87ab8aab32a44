// Log level from CLDL_LOG and the stderr sink (one line per message, serialised across threads).
#include "runtime/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace cldl::log {
namespace {
Level parse_env() {
  const char* v = std::getenv("CLDL_LOG");
  if (!v) return Level::off;
  std::string s(v);
  if (s == "error") return Level::error;
  if (s == "warn" || s == "warning") return Level::warn;
  if (s == "info") return Level::info;
  if (s == "debug") return Level::debug;
  return Level::off;
}
std::atomic<int>& current() {
  static std::atomic<int> l{static_cast<int>(parse_env())};
  return l;
}
}  // namespace

Level level() noexcept { return static_cast<Level>(current().load(std::memory_order_relaxed)); }
void set_level(Level l) noexcept { current().store(static_cast<int>(l)); }

void write(Level l, std::string_view message) noexcept {
  static std::mutex m;
  static const char* names[] = {"", "error", "warn", "info", "debug"};
  std::lock_guard lock(m);
  std::fprintf(stderr, "cldl %s: %.*s\n", names[static_cast<int>(l)], static_cast<int>(message.size()),
               message.data());
}

}  // namespace cldl::log
