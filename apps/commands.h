// Registration of each kvmem subcommand on the CLI11 app. A subcommand's callback throws
// CLI::RuntimeError(exit_code) so main() returns its status.
#pragma once

#include "CLI/CLI.hpp"

namespace kvmem::app {

void AddRunCommand(CLI::App& app);
void AddIdsCommands(CLI::App& app);
void AddServeCommand(CLI::App& app);
void AddChatCommand(CLI::App& app);
void AddInspectCommand(CLI::App& app);
// `segments put|delete|list`: the named segments of an agent's memory (the keep policy).
void AddSegmentsCommands(CLI::App& app);
// `scenario run|check`: multi-agent scenarios over agents' KV memories.
void AddScenarioCommands(CLI::App& app);
void AddCalibrateCommand(CLI::App& app);
// `bench`: llama-bench-like speed tests against a measured roofline.
void AddBenchCommand(CLI::App& app);
// `eval` and its subcommands (`eval kvquant`).
void AddEvalCommands(CLI::App& app);
void AddEvalKvQuantCommand(CLI::App& eval);
void AddEvalNeedleCommand(CLI::App& eval);
void AddEvalLocomoCommand(CLI::App& eval);
void AddEvalAgentTraceCommand(CLI::App& eval);
void AddEvalSegmentsCommand(CLI::App& eval);

}  // namespace kvmem::app
