// `kvmem segments put|delete|list AGENT [NAME] [--text T | --file F]`: the segments of an agent
// whose memory is named segments (the `keep` policy) in the local store, as PUT, DELETE and GET
// /v1/agents/{id}/segments do on a server (the same AgentRuntime::Segments). A put on an agent
// that does not exist creates it with --memory (keep by default). A running server holds the
// store's lock: use its API then. Output: JSON, one object per line (list: one per segment).
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "agent_env.h"
#include "commands.h"
#include "common.h"
#include "serve/http_server.h"

namespace kvmem::app {
namespace {

struct SegmentsOptions {
  AgentEnvOptions env;
  std::string tenant = serve::kDefaultTenant;
  std::string agent;
  std::string name;
  std::string text;
  std::string file;
  bool has_text = false;
};

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot open " + path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return IoError("cannot read " + path);
  return text;
}

void Print(const memory::Json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, memory::Json::error_handler_t::replace).c_str());
}

int Run(const SegmentsOptions& o, memory::SegmentRequest request) {
  using Op = memory::SegmentRequest::Op;
  if (request.op == Op::kPut) {
    if (o.has_text == !o.file.empty()) return Fail(InvalidArgument("put takes --text or --file"));
    if (o.has_text) {
      request.text = o.text;
    } else {
      Result<std::string> text = ReadTextFile(o.file);
      if (!text.ok()) return Fail(text.status());
      request.text = std::move(*text);
    }
  }
  if (Status valid = memory::ValidateSegmentRequest(request); !valid.ok()) return Fail(valid);
  auto env = OpenAgentEnv(o.env);
  if (!env.ok()) return Fail(env.status());
  memory::AgentRuntime& rt = *(*env)->runtime;
  const memory::store::AgentKey key{o.tenant, o.agent};
  if (Status valid = memory::store::ValidateAgentKey(key); !valid.ok()) return Fail(valid);
  if (request.op == Op::kPut) {
    Result<memory::AgentStatus> existing = rt.Get(key);
    if (!existing.ok() && existing.status().code() != ErrorCode::kNotFound) {
      return Fail(existing.status());
    }
    if (!existing.ok()) {
      if (Status made = rt.CreateAgent(key, rt.default_memory()); !made.ok()) return Fail(made);
      std::fprintf(stderr, "kvmem segments: created agent '%s' with %s memory\n", o.agent.c_str(),
                   rt.default_memory().kind->name.c_str());
    }
  }
  Result<memory::Json> done = rt.Segments(key, request);
  if (!done.ok()) return Fail(done.status());
  if (request.op == Op::kList) {
    for (const memory::Json& s : *done) Print(s);
  } else {
    Print(*done);
  }
  return 0;
}

CLI::App* AddOp(CLI::App* parent, const char* name, const char* what,
                std::shared_ptr<SegmentsOptions> o, memory::SegmentRequest::Op op) {
  CLI::App* cmd = parent->add_subcommand(name, what);
  AddAgentEnvOptions(cmd, &o->env);
  cmd->add_option("--tenant", o->tenant, "tenant (the server's default tenant by default)")
      ->capture_default_str();
  cmd->add_option("agent", o->agent, "agent id")->required();
  if (op != memory::SegmentRequest::Op::kList) {
    cmd->add_option("name", o->name, "segment name")->required();
  }
  cmd->callback([o, op] {
    memory::SegmentRequest r;
    r.op = op;
    r.name = o->name;
    throw CLI::RuntimeError(Run(*o, std::move(r)));
  });
  return cmd;
}

}  // namespace

void AddSegmentsCommands(CLI::App& app) {
  CLI::App* segments = app.add_subcommand(
      "segments", "The named segments of an agent's memory (the keep policy), in the local store");
  segments->require_subcommand(1);
  auto o = std::make_shared<SegmentsOptions>();
  o->env.memory = "keep";
  CLI::App* put = AddOp(segments, "put", "Add or replace a segment (creates the agent if new)", o,
                        memory::SegmentRequest::Op::kPut);
  put->add_option("--text", o->text, "the segment's text")->each([o](const std::string&) {
    o->has_text = true;
  });
  put->add_option("--file", o->file, "read the segment's text from a file");
  AddMemoryOptions(put, &o->env, "a new agent");
  AddOp(segments, "delete", "Delete a segment", o, memory::SegmentRequest::Op::kDelete);
  AddOp(segments, "list", "List the segments, in memory order", o,
        memory::SegmentRequest::Op::kList);
}

}  // namespace kvmem::app
