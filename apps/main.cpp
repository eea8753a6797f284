// kvmem: the command-line entry point. Each subcommand lives in its own cmd_*.cpp.
#include <cstdio>

#include "CLI/CLI.hpp"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kvmem: an LLM engine whose agents remember in their KV cache"};
  app.require_subcommand(1);
  kvmem::app::AddRunCommand(app);
  kvmem::app::AddIdsCommands(app);
  kvmem::app::AddEvalCommands(app);
  kvmem::app::AddServeCommand(app);
  kvmem::app::AddChatCommand(app);
  kvmem::app::AddInspectCommand(app);
  kvmem::app::AddSegmentsCommands(app);
  kvmem::app::AddScenarioCommands(app);
  kvmem::app::AddCalibrateCommand(app);
  kvmem::app::AddBenchCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
