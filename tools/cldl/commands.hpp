// Subcommand registration for the cldl CLI. Each subcommand lives in its own cmd_*.cpp file and
// registers itself here through register_commands.
#pragma once
#include <CLI/CLI.hpp>

namespace cldl::cli {

void register_commands(CLI::App& app);
// Exit status set by the subcommand that ran (0 unless it reported a failure without throwing).
int exit_code();
void set_exit_code(int code);

// One function per subcommand file.
void add_devices_command(CLI::App& app);
void add_selftest_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_compile_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_profile_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_classify_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_ops_command(CLI::App& app);

}  // namespace cldl::cli
