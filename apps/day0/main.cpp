// day0: Day-0 adaptation of newly released open LLMs. Thin shell: every subcommand lives in its own
// file and calls the library.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>

#include <fmt/format.h>

#include "command.h"
#include "day0/core/error.h"

namespace day0::cli {

std::vector<CommandInfo>& command_registry() {
  static std::vector<CommandInfo> registry;
  return registry;
}

CLI::Option* add_page_cache_option(CLI::App& app, std::string& value) {
  return app
      .add_option("--page-cache", value,
                  "the checkpoint's pages cached already: keep (default) or reload: drop them so the run "
                  "reads the files back in 2 MiB pages, which decoding streams faster (one more read of "
                  "the files)")
      ->check(CLI::IsMember({"keep", "reload"}));
}

PageCache page_cache_from(const std::string& value) {
  return value == "reload" ? PageCache::kReload : PageCache::kKeep;
}

CLI::Validator finite_number(double lo, double hi, const std::string& meaning, bool lo_open) {
  const std::string range = fmt::format("{}{}, {}]", lo_open ? "(" : "[", lo, hi);
  return CLI::Validator(
      [lo, hi, lo_open, meaning, range](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || end == text.c_str() || *end != '\0')
          return fmt::format("{:?} is not a number", text);
        if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) {
          return fmt::format("{} must be a finite number in {}, found {}", meaning, range, text);
        }
        return {};
      },
      "NUMBER in " + range);
}

int report_error(const std::string& command, const Status& status) {
  fmt::print(stderr, "day0 {}: error: {}\n", command, status.to_string());
  return status.code() == StatusCode::kInternal ? kExitInternal : kExitBadInput;
}

}  // namespace day0::cli

int main(int argc, char** argv) {
  using namespace day0::cli;
  CLI::App app{
      "day0: take a newly released open LLM (config.json + safetensors shards) to runnable, "
      "correct and fast, with measured evidence.",
      "day0"};
  app.set_version_flag("--version", std::string("day0 ") + DAY0_VERSION);
  app.require_subcommand(1);

  auto registry = command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const CommandInfo& a, const CommandInfo& b) { return a.order < b.order; });
  std::vector<std::pair<CLI::App*, CommandRunner>> runners;
  // Set-up reads embedded data too (inspect's help lists the catalog): a bug there also exits 3.
  try {
    for (auto& info : registry) {
      CLI::App* sub = app.add_subcommand(info.name, info.description);
      runners.emplace_back(sub, info.setup(*sub));
    }
  } catch (const day0::InternalError& e) {
    fmt::print(stderr, "day0: internal error: {}\n", e.what());
    return kExitInternal;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitBadInput;
  }

  for (auto& [sub, runner] : runners) {
    if (!sub->parsed()) continue;
    try {
      return runner();
    } catch (const std::bad_alloc&) {
      // Sizes from input are checked before allocation; what still runs out is the machine.
      fmt::print(stderr,
                 "day0 {}: error: resource exhausted: out of memory (the request needs more memory than "
                 "this machine can give; try smaller sizes or a machine with more memory)\n",
                 sub->get_name());
      return kExitBadInput;
    } catch (const day0::InternalError& e) {
      fmt::print(stderr, "day0 {}: internal error: {}\n", sub->get_name(), e.what());
      return kExitInternal;
    } catch (const std::exception& e) {
      fmt::print(stderr, "day0 {}: internal error: {}\n", sub->get_name(), e.what());
      return kExitInternal;
    }
  }
  return kExitBadInput;
}
