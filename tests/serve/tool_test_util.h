// Helpers for the tests of the templates' own tool formats: the goldens that
// scripts/make_tool_template_vectors.py writes, and their tools and conversations as the request
// parsers reduce them (ToolRequest, ToolTurn).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "serve/tool_calls.h"

namespace kvmem::serve::testing {

// Keys in the order the file has them (a call's arguments as the client wrote them).
using OJson = nlohmann::ordered_json;

inline std::string ReadTestFile(const std::string& relative_path) {
  std::ifstream in(std::string(KVMEM_TESTDATA_DIR) + "/" + relative_path);
  EXPECT_TRUE(in.good()) << relative_path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// tests/data/tokenizer/<name>: {"tools": [...], "cases": [{"template", "messages", "rendered"}]}.
inline OJson LoadToolVectors(const std::string& name) {
  const std::string text = ReadTestFile("tokenizer/" + name);
  return text.empty() ? OJson::object() : OJson::parse(text);
}

// OpenAI-style tools; each schema's keys in name order, as the server keeps them.
inline ToolRequest ToolRequestOf(const OJson& tools) {
  ToolRequest r;
  for (const OJson& t : tools) {
    const OJson& fn = t["function"];
    r.tools.push_back({.name = fn["name"].get<std::string>(),
                       .description = fn.value("description", ""),
                       .parameters = nlohmann::json::parse(fn["parameters"].dump())});
  }
  return r;
}

// OpenAI-style messages; each call gets the id "call_1".
inline std::vector<ToolTurn> ToolTurnsOf(const OJson& messages) {
  std::vector<ToolTurn> turns;
  for (const OJson& m : messages) {
    ToolTurn t{.role = m["role"].get<std::string>()};
    if (m.contains("content")) t.text = m["content"].get<std::string>();
    for (const OJson& c : m.value("tool_calls", OJson::array())) {
      const OJson& fn = c["function"];
      t.calls.push_back({"call_1", fn["name"].get<std::string>(), fn["arguments"].dump()});
    }
    turns.push_back(std::move(t));
  }
  return turns;
}

}  // namespace kvmem::serve::testing
