#include "scenario/scenario.h"

#include <cstdio>
#include <set>

#include "scenario/templates.h"
#include "yaml-cpp/yaml.h"

namespace kvmem::scenario {
namespace {

constexpr size_t kMaxFileBytes = size_t{1} << 20;
constexpr int kMaxRounds = 100;
constexpr int kMaxTokens = 4096;

// "line 7: " (yaml-cpp counts from 0).
std::string At(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? std::string() : "line " + std::to_string(mark.line + 1) + ": ";
}

Status Error(const YAML::Node& node, const std::string& message) {
  return InvalidArgument("scenario: " + At(node) + message);
}

bool IsName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Refuses keys of `map` outside `allowed`, naming the first.
Status CheckKeys(const YAML::Node& map, const std::string& what,
                 std::initializer_list<std::string_view> allowed) {
  for (const auto& kv : map) {
    const std::string key = kv.first.Scalar();
    bool known = false;
    for (std::string_view a : allowed) known = known || key == a;
    if (!known) return Error(kv.first, "unknown key '" + key + "' in " + what);
  }
  return Status::Ok();
}

Result<std::string> String(const YAML::Node& map, const std::string& key, const std::string& what,
                           bool required) {
  const YAML::Node node = map[key];
  if (!node) {
    if (required) return Error(map, what + " needs '" + key + "'");
    return std::string();
  }
  if (!node.IsScalar()) return Error(node, what + "." + key + " must be a string");
  return node.Scalar();
}

Result<std::string> Name(const YAML::Node& map, const std::string& key, const std::string& what) {
  KVMEM_ASSIGN_OR_RETURN(std::string name, String(map, key, what, true));
  if (!IsName(name)) {
    return Error(map[key],
                 what + "." + key + " '" + name + "' must be 1-64 characters of A-Z a-z 0-9 _ -");
  }
  return name;
}

Result<int> Int(const YAML::Node& map, const std::string& key, const std::string& what, int dflt,
                int min, int max) {
  const YAML::Node node = map[key];
  if (!node) return dflt;
  int v = 0;
  if (!node.IsScalar() || !YAML::convert<int>::decode(node, v) || v < min || v > max) {
    return Error(node, what + "." + key + " must be an integer in [" + std::to_string(min) + ", " +
                           std::to_string(max) + "]");
  }
  return v;
}

// A YAML value as JSON (the agents API's memory object): maps, sequences and scalars, where
// scalars that read as numbers or booleans become those.
nlohmann::json ToJson(const YAML::Node& node) {
  if (node.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& kv : node) out[kv.first.Scalar()] = ToJson(kv.second);
    return out;
  }
  if (node.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& item : node) out.push_back(ToJson(item));
    return out;
  }
  if (!node.IsScalar()) return nullptr;
  if (node.Tag() == "!") return node.Scalar();  // quoted: a string whatever it reads as
  int64_t i = 0;
  double d = 0;
  bool b = false;
  if (YAML::convert<int64_t>::decode(node, i)) return i;
  if (YAML::convert<double>::decode(node, d)) return d;
  if (YAML::convert<bool>::decode(node, b)) return b;
  return node.Scalar();
}

Result<AgentSpec> ParseAgent(const YAML::Node& node) {
  if (!node.IsMap()) return Error(node, "each of agents must be a map");
  KVMEM_RETURN_IF_ERROR(
      CheckKeys(node, "an agent", {"id", "name", "system", "memory", "permanent"}));
  AgentSpec a;
  KVMEM_ASSIGN_OR_RETURN(a.id, Name(node, "id", "agent"));
  const std::string what = "agent '" + a.id + "'";
  KVMEM_ASSIGN_OR_RETURN(a.name, String(node, "name", what, false));
  if (a.name.empty()) a.name = a.id;
  if (a.name == "You" || a.name.find('\n') != std::string::npos) {
    return Error(node, what + ".name must be one line and not 'You' (a transcript's own lines)");
  }
  KVMEM_ASSIGN_OR_RETURN(a.system, String(node, "system", what, true));
  if (const YAML::Node memory = node["memory"]) {
    if (!memory.IsMap() || !memory["policy"] || !memory["policy"].IsScalar()) {
      return Error(memory, what + ".memory must be {policy: NAME, config: {...}}");
    }
    KVMEM_RETURN_IF_ERROR(CheckKeys(memory, what + ".memory", {"policy", "config"}));
    if (memory["config"] && !memory["config"].IsMap()) {
      return Error(memory["config"], what + ".memory.config must be a map");
    }
    a.memory = ToJson(memory);
    if (!a.memory.contains("config")) a.memory["config"] = nlohmann::json::object();
    a.memory["policy"] = memory["policy"].Scalar();
  }
  if (const YAML::Node permanent = node["permanent"]) {
    if (!permanent.IsScalar() || !YAML::convert<bool>::decode(permanent, a.permanent)) {
      return Error(permanent, what + ".permanent must be true or false");
    }
  }
  return a;
}

// A list of distinct agent ids (checked to exist later).
Result<std::vector<std::string>> IdList(const YAML::Node& map, const std::string& key,
                                        const std::string& what, bool required) {
  const YAML::Node list = map[key];
  if (!list && !required) return std::vector<std::string>();
  if (!list || !list.IsSequence() || (required && list.size() == 0)) {
    return Error(list ? list : map, what + "." + key + " must be a " +
                                        (required ? "non-empty " : "") + "list of agent ids");
  }
  std::vector<std::string> ids;
  for (const auto& a : list) {
    if (!a.IsScalar()) return Error(a, what + "." + key + " must list agent ids");
    for (const std::string& seen : ids) {
      if (seen == a.Scalar()) return Error(a, what + "." + key + " lists '" + seen + "' twice");
    }
    ids.push_back(a.Scalar());
  }
  return ids;
}

Result<Phase> ParsePhase(const YAML::Node& node) {
  if (!node.IsMap()) return Error(node, "each of phases must be a map");
  KVMEM_RETURN_IF_ERROR(CheckKeys(node, "a phase",
                                  {"name", "label", "agents", "auto_rounds", "prompt",
                                   "per_agent_prompt_templates", "visible_to"}));
  Phase p;
  KVMEM_ASSIGN_OR_RETURN(p.name, Name(node, "name", "phase"));
  const std::string what = "phase '" + p.name + "'";
  KVMEM_ASSIGN_OR_RETURN(p.label, String(node, "label", what, false));
  if (p.label.empty()) p.label = p.name;
  KVMEM_ASSIGN_OR_RETURN(p.prompt, String(node, "prompt", what, false));
  KVMEM_ASSIGN_OR_RETURN(p.auto_rounds, Int(node, "auto_rounds", what, 1, 1, kMaxRounds));
  KVMEM_ASSIGN_OR_RETURN(p.agents, IdList(node, "agents", what, true));
  KVMEM_ASSIGN_OR_RETURN(p.visible_to, IdList(node, "visible_to", what, false));
  if (const YAML::Node templates = node["per_agent_prompt_templates"]) {
    if (!templates.IsMap())
      return Error(templates, what + ".per_agent_prompt_templates must be a map");
    for (const auto& kv : templates) {
      if (!kv.second.IsScalar()) {
        return Error(kv.second,
                     what + ": the template of '" + kv.first.Scalar() + "' must be a string");
      }
      p.templates[kv.first.Scalar()] = kv.second.Scalar();
    }
  }
  return p;
}

bool Contains(const std::vector<std::string>& ids, std::string_view id) {
  for (const std::string& s : ids) {
    if (s == id) return true;
  }
  return false;
}

// Cross-references: agents of phases exist, templates belong to agents of their phase and name
// earlier phases that their agent took part in or may see, from the perspective of one of that
// phase's agents or of their own agent.
Status Validate(const Scenario& s, const YAML::Node& phases) {
  for (size_t i = 0; i < s.phases.size(); ++i) {
    const Phase& p = s.phases[i];
    const YAML::Node node = phases[i];
    const std::string what = "phase '" + p.name + "'";
    if (s.FindPhase(p.name) != static_cast<int>(i))
      return Error(node, "two phases are named '" + p.name + "'");
    for (const std::string& id : p.agents) {
      if (s.FindAgent(id) == nullptr)
        return Error(node["agents"], what + ": unknown agent '" + id + "'");
    }
    for (const std::string& id : p.visible_to) {
      if (s.FindAgent(id) == nullptr) {
        return Error(node["visible_to"], what + ".visible_to: unknown agent '" + id + "'");
      }
    }
    for (const auto& [owner, text] : p.templates) {
      const YAML::Node at = node["per_agent_prompt_templates"];
      if (!Contains(p.agents, owner)) {
        return Error(at, what + ": a template for '" + owner + "', who is not in this phase");
      }
      auto refs = FindTemplateRefs(text);
      if (!refs.ok())
        return Error(at, what + ", template of '" + owner + "': " + refs.status().message());
      for (const TemplateRef& ref : *refs) {
        const std::string where = what + ", template of '" + owner + "': ${" + ref.phase +
                                  ".messages[" + ref.agent + "]}: ";
        const int j = s.FindPhase(ref.phase);
        if (j < 0) return Error(at, where + "unknown phase '" + ref.phase + "'");
        if (j >= static_cast<int>(i))
          return Error(at, where + "phase '" + ref.phase + "' has not run yet");
        const Phase& earlier = s.phases[j];
        if (s.FindAgent(ref.agent) == nullptr)
          return Error(at, where + "unknown agent '" + ref.agent + "'");
        if (!Contains(earlier.agents, ref.agent) && ref.agent != owner) {
          return Error(at, where + "'" + ref.agent + "' was not in phase '" + ref.phase + "'");
        }
        if (!Contains(earlier.agents, owner) && !Contains(earlier.visible_to, owner)) {
          return Error(at, where + "would show '" + owner + "' the private phase '" + ref.phase +
                               "' it was not in");
        }
      }
    }
  }
  return Status::Ok();
}

Result<Scenario> Parse(const YAML::Node& root) {
  if (!root.IsMap()) return InvalidArgument("scenario: the document must be a map");
  KVMEM_RETURN_IF_ERROR(
      CheckKeys(root, "the scenario", {"name", "agents", "phases", "max_tokens", "temperature"}));
  Scenario s;
  KVMEM_ASSIGN_OR_RETURN(s.name, Name(root, "name", "scenario"));
  KVMEM_ASSIGN_OR_RETURN(s.max_tokens, Int(root, "max_tokens", "scenario", 96, 1, kMaxTokens));
  if (const YAML::Node t = root["temperature"]) {
    if (!t.IsScalar() || !YAML::convert<double>::decode(t, s.temperature) ||
        !(s.temperature >= 0 && s.temperature <= 2)) {
      return Error(t, "scenario.temperature must be a number in [0, 2]");
    }
  }
  const YAML::Node agents = root["agents"];
  if (!agents || !agents.IsSequence() || agents.size() == 0) {
    return Error(agents ? agents : root, "scenario.agents must be a non-empty list");
  }
  for (const auto& node : agents) {
    KVMEM_ASSIGN_OR_RETURN(AgentSpec a, ParseAgent(node));
    if (s.FindAgent(a.id) != nullptr) return Error(node, "two agents have the id '" + a.id + "'");
    s.agents.push_back(std::move(a));
  }
  const YAML::Node phases = root["phases"];
  if (!phases || !phases.IsSequence() || phases.size() == 0) {
    return Error(phases ? phases : root, "scenario.phases must be a non-empty list");
  }
  for (const auto& node : phases) {
    KVMEM_ASSIGN_OR_RETURN(Phase p, ParsePhase(node));
    s.phases.push_back(std::move(p));
  }
  KVMEM_RETURN_IF_ERROR(Validate(s, phases));
  return s;
}

}  // namespace

const AgentSpec* Scenario::FindAgent(std::string_view id) const {
  for (const AgentSpec& a : agents) {
    if (a.id == id) return &a;
  }
  return nullptr;
}

int Scenario::FindPhase(std::string_view phase) const {
  for (size_t i = 0; i < phases.size(); ++i) {
    if (phases[i].name == phase) return static_cast<int>(i);
  }
  return -1;
}

Result<Scenario> ParseScenario(std::string_view yaml) {
  if (yaml.size() > kMaxFileBytes) return InvalidArgument("scenario: larger than 1 MiB");
  try {
    return Parse(YAML::Load(std::string(yaml)));
  } catch (const YAML::Exception& e) {
    // e.what() carries yaml-cpp's own "yaml-cpp: error at line L, column C: ...".
    return InvalidArgument(std::string("scenario: not valid YAML: ") + e.what());
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("scenario: ") + e.what());
  }
}

Result<Scenario> LoadScenario(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return NotFound("scenario: cannot open '" + path + "'");
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() <= kMaxFileBytes) {
    text.append(buf, n);
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return IoError("scenario: cannot read '" + path + "'");
  auto s = ParseScenario(text);
  if (!s.ok()) return s.status().WithContext(path);
  return s;
}

}  // namespace kvmem::scenario
