#pragma once
// Subcommands register themselves: one file per subcommand defines a static Registrar, so adding a
// command never touches main.cpp. The setup function declares the options on the CLI11 subcommand and
// returns the function that runs it (called once, after parsing, with the parsed values in place).
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "day0/core/status.h"
#include "day0/runtime/tensor_source.h"

namespace day0::cli {

// Exit codes shared by every subcommand (docs/commands.md, "Conventions").
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;  // verify / align / adapt verdict: the check failed
inline constexpr int kExitBadInput = 2;     // bad usage or bad input
inline constexpr int kExitInternal = 3;     // a bug: an invariant broke

using CommandRunner = std::function<int()>;
using CommandSetup = std::function<CommandRunner(CLI::App& subcommand)>;

struct CommandInfo {
  std::string name;
  std::string description;
  int order;  // position in --help (the Day-0 checklist order)
  CommandSetup setup;
};

std::vector<CommandInfo>& command_registry();

struct Registrar {
  Registrar(std::string name, std::string description, int order, CommandSetup setup) {
    command_registry().push_back({std::move(name), std::move(description), order, std::move(setup)});
  }
};

// A finite number in [lo, hi] (in (lo, hi] when lo_open). Unlike CLI::Range it refuses NaN and
// infinities, and its message says what the option means. CLI11 turns a refusal into exit 2.
CLI::Validator finite_number(double lo, double hi, const std::string& meaning, bool lo_open = false);

// --page-cache keep|reload, shared by the commands that run a model (runtime/tensor_source.h).
CLI::Option* add_page_cache_option(CLI::App& app, std::string& value);
PageCache page_cache_from(const std::string& value);

// Prints "day0 <command>: error: <status>" on stderr and returns the matching exit code.
int report_error(const std::string& command, const Status& status);

}  // namespace day0::cli
