// `kvmem eval`: the group of measurement harnesses; each lives in its own cmd_eval_*.cpp over a
// library in apps/eval/.
#include "CLI/CLI.hpp"
#include "commands.h"

namespace kvmem::app {

void AddEvalCommands(CLI::App& app) {
  CLI::App* eval = app.add_subcommand("eval", "Measure the engine on benchmark data");
  eval->require_subcommand(1);
  AddEvalKvQuantCommand(*eval);
  AddEvalNeedleCommand(*eval);
  AddEvalLocomoCommand(*eval);
  AddEvalAgentTraceCommand(*eval);
  AddEvalSegmentsCommand(*eval);
}

}  // namespace kvmem::app
