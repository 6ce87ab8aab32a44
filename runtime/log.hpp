// Levelled logging to stderr through fmt. Quiet by default; CLDL_LOG=error|warn|info|debug.
#pragma once
#include <fmt/format.h>

#include <string_view>

namespace cldl::log {

enum class Level { off = 0, error = 1, warn = 2, info = 3, debug = 4 };

Level level() noexcept;  // from CLDL_LOG, read once; set_level overrides.
void set_level(Level l) noexcept;
void write(Level l, std::string_view message) noexcept;

template <typename... Args>
void at(Level l, fmt::format_string<Args...> f, Args&&... args) {
  if (static_cast<int>(l) <= static_cast<int>(level())) write(l, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) { at(Level::error, f, std::forward<Args>(args)...); }
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) { at(Level::warn, f, std::forward<Args>(args)...); }
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) { at(Level::info, f, std::forward<Args>(args)...); }
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) { at(Level::debug, f, std::forward<Args>(args)...); }

}  // namespace cldl::log
