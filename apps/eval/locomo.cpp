#include "eval/locomo.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kvmem::eval {
namespace {

using nlohmann::json;

// "session_12" -> 12 when `key` is exactly session_<N> (suffix "" ) or session_<N><suffix>;
// 0 when the key is something else; -1 when the number is malformed.
int SessionNumber(std::string_view key, std::string_view suffix) {
  constexpr std::string_view kPrefix = "session_";
  if (key.size() <= kPrefix.size() + suffix.size() || !key.starts_with(kPrefix) ||
      !key.ends_with(suffix)) {
    return 0;
  }
  std::string_view digits =
      key.substr(kPrefix.size(), key.size() - kPrefix.size() - suffix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return 0;
  }
  if (digits.size() > 6 || digits[0] == '0') return -1;
  int n = 0;
  for (char c : digits) n = n * 10 + (c - '0');
  return n;
}

enum class Kind { kString, kInteger, kArray, kObject };

Status Expect(const json& j, Kind kind, std::string_view what) {
  static constexpr const char* kNames[] = {"a string", "an integer", "an array", "an object"};
  const bool good = kind == Kind::kString    ? j.is_string()
                    : kind == Kind::kInteger ? j.is_number_integer()
                    : kind == Kind::kArray   ? j.is_array()
                                             : j.is_object();
  if (good) return Status::Ok();
  return InvalidArgument(std::string(what) + " must be " + kNames[static_cast<int>(kind)] +
                         ", got " + j.type_name());
}

Result<std::string> RequiredString(const json& obj, const std::string& key,
                                   std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end()) return InvalidArgument(std::string(where) + ": missing '" + key + "'");
  KVMEM_RETURN_IF_ERROR(
      Expect(*it, Kind::kString, std::string(where) + "." + key));
  return it->get<std::string>();
}

Result<std::string> OptionalString(const json& obj, const std::string& key,
                                   std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::string();
  KVMEM_RETURN_IF_ERROR(
      Expect(*it, Kind::kString, std::string(where) + "." + key));
  return it->get<std::string>();
}

Result<LocomoTurn> ParseTurn(const json& j, const std::string& where) {
  KVMEM_RETURN_IF_ERROR(Expect(j, Kind::kObject, where));
  LocomoTurn t;
  KVMEM_ASSIGN_OR_RETURN(t.speaker, RequiredString(j, "speaker", where));
  KVMEM_ASSIGN_OR_RETURN(t.dia_id, RequiredString(j, "dia_id", where));
  KVMEM_ASSIGN_OR_RETURN(t.text, RequiredString(j, "text", where));
  KVMEM_ASSIGN_OR_RETURN(t.blip_caption, OptionalString(j, "blip_caption", where));
  return t;
}

Result<LocomoQa> ParseQa(const json& j, const std::string& where) {
  KVMEM_RETURN_IF_ERROR(Expect(j, Kind::kObject, where));
  LocomoQa q;
  KVMEM_ASSIGN_OR_RETURN(q.question, RequiredString(j, "question", where));
  if (auto it = j.find("answer"); it != j.end() && !it->is_null()) {
    // A few answers are bare numbers (years, counts).
    if (it->is_string()) {
      q.answer = it->get<std::string>();
    } else if (it->is_number_integer()) {
      q.answer = std::to_string(it->get<int64_t>());
    } else if (it->is_number()) {
      q.answer = it->dump();
    } else {
      return InvalidArgument(where + ".answer must be a string or a number, got " +
                             it->type_name());
    }
  }
  KVMEM_ASSIGN_OR_RETURN(q.adversarial_answer, OptionalString(j, "adversarial_answer", where));
  if (auto it = j.find("evidence"); it != j.end()) {
    KVMEM_RETURN_IF_ERROR(Expect(*it, Kind::kArray, where + ".evidence"));
    for (const json& e : *it) {
      KVMEM_RETURN_IF_ERROR(Expect(e, Kind::kString, where + ".evidence[]"));
      q.evidence.push_back(e.get<std::string>());
    }
  }
  auto cat = j.find("category");
  if (cat == j.end()) return InvalidArgument(where + ": missing 'category'");
  KVMEM_RETURN_IF_ERROR(Expect(*cat, Kind::kInteger, where + ".category"));
  const int64_t c = cat->get<int64_t>();
  if (c < 1 || c > 5) return InvalidArgument(where + ".category " + std::to_string(c) + " not in 1..5");
  q.category = static_cast<int>(c);
  return q;
}

// `conv` holds speakers and sessions; `top` holds qa and sample_id (the same object in the
// per-conversation files).
Result<LocomoConversation> ParseConversation(const json& top, const json& conv,
                                             const std::string& default_id) {
  LocomoConversation c;
  KVMEM_ASSIGN_OR_RETURN(c.id, OptionalString(top, "sample_id", default_id));
  if (c.id.empty()) c.id = default_id;
  const std::string& w = c.id;
  KVMEM_ASSIGN_OR_RETURN(c.speaker_a, RequiredString(conv, "speaker_a", w));
  KVMEM_ASSIGN_OR_RETURN(c.speaker_b, RequiredString(conv, "speaker_b", w));

  std::map<int, LocomoSession> sessions;
  for (const auto& [key, value] : conv.items()) {
    const int n = SessionNumber(key, "");
    if (n == 0) continue;
    if (n < 0) return InvalidArgument(w + ": bad session key '" + key + "'");
    const std::string where = w + "." + key;
    KVMEM_RETURN_IF_ERROR(Expect(value, Kind::kArray, where));
    if (value.empty()) continue;
    LocomoSession s;
    s.number = n;
    KVMEM_ASSIGN_OR_RETURN(s.date_time, RequiredString(conv, key + "_date_time", w));
    for (size_t i = 0; i < value.size(); ++i) {
      KVMEM_ASSIGN_OR_RETURN(LocomoTurn t,
                             ParseTurn(value[i], where + "[" + std::to_string(i) + "]"));
      s.turns.push_back(std::move(t));
    }
    sessions.emplace(n, std::move(s));
  }
  if (sessions.empty()) return InvalidArgument(w + ": no session_N with turns");
  for (auto& [n, s] : sessions) c.sessions.push_back(std::move(s));

  if (auto it = top.find("qa"); it != top.end()) {
    KVMEM_RETURN_IF_ERROR(Expect(*it, Kind::kArray, w + ".qa"));
    for (size_t i = 0; i < it->size(); ++i) {
      KVMEM_ASSIGN_OR_RETURN(LocomoQa q, ParseQa((*it)[i], w + ".qa[" + std::to_string(i) + "]"));
      c.qa.push_back(std::move(q));
    }
  }
  return c;
}

Result<LocomoConversation> ParseSample(const json& j, const std::string& id) {
  KVMEM_RETURN_IF_ERROR(Expect(j, Kind::kObject, id));
  if (auto it = j.find("conversation"); it != j.end()) {
    KVMEM_RETURN_IF_ERROR(Expect(*it, Kind::kObject, id + ".conversation"));
    return ParseConversation(j, *it, id);
  }
  return ParseConversation(j, j, id);
}

// Appends `text` trimmed, with every whitespace run that holds a line break made one space.
void AppendOneLine(std::string_view text, std::string* out) {
  auto is_space = [](char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
  };
  size_t b = 0, e = text.size();
  while (b < e && is_space(text[b])) ++b;
  while (e > b && is_space(text[e - 1])) --e;
  for (size_t i = b; i < e;) {
    if (!is_space(text[i])) {
      out->push_back(text[i++]);
      continue;
    }
    size_t j = i;
    bool line_break = false;
    for (; j < e && is_space(text[j]); ++j) line_break |= text[j] == '\n' || text[j] == '\r';
    if (line_break) {
      out->push_back(' ');
    } else {
      out->append(text.substr(i, j - i));
    }
    i = j;
  }
}

}  // namespace

Result<std::vector<LocomoConversation>> ParseLocomo(std::string_view text, std::string_view id) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return InvalidArgument(std::string(id) + ": not valid JSON (" + e.what() + ")");
  }
  std::vector<LocomoConversation> out;
  if (j.is_array()) {
    if (j.empty()) return InvalidArgument(std::string(id) + ": empty array");
    for (size_t i = 0; i < j.size(); ++i) {
      KVMEM_ASSIGN_OR_RETURN(LocomoConversation c,
                             ParseSample(j[i], std::string(id) + "#" + std::to_string(i)));
      out.push_back(std::move(c));
    }
    return out;
  }
  KVMEM_ASSIGN_OR_RETURN(LocomoConversation c, ParseSample(j, std::string(id)));
  out.push_back(std::move(c));
  return out;
}

Result<std::vector<std::string>> ResolveLocomoFiles(const std::vector<std::string>& given) {
  namespace fs = std::filesystem;
  std::vector<std::string> roots = given;
  if (roots.empty()) {
    const char* env = std::getenv("KVMEM_DATA");
    const fs::path dir = env != nullptr && *env ? fs::path(env) / "locomo"
                                                : fs::path("..") / "shared" / "data" / "locomo";
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      return NotFound("no LoCoMo data at " + dir.string() +
                      " (set KVMEM_DATA to the data root, or pass --data FILE_OR_DIR)");
    }
    roots.push_back(dir.string());
  }
  std::vector<std::string> files;
  for (const std::string& r : roots) {
    std::error_code ec;
    if (!fs::is_directory(r, ec)) {
      files.push_back(r);  // a missing file is reported when it is read
      continue;
    }
    std::vector<std::string> in_dir;
    for (const fs::directory_entry& e : fs::directory_iterator(r, ec)) {
      if (e.path().extension() == ".json" && e.is_regular_file(ec)) {
        in_dir.push_back(e.path().string());
      }
    }
    if (ec) return IoError("cannot list '" + r + "': " + ec.message());
    if (in_dir.empty()) return NotFound("no *.json in '" + r + "'");
    std::sort(in_dir.begin(), in_dir.end());
    files.insert(files.end(), in_dir.begin(), in_dir.end());
  }
  return files;
}

Result<std::vector<LocomoConversation>> LoadLocomoFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return IoError("cannot read '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return IoError("error reading '" + path + "'");
  std::string id = path.substr(path.find_last_of('/') + 1);  // npos + 1 == 0
  if (size_t dot = id.rfind('.'); dot != std::string::npos && dot > 0) id.resize(dot);
  auto r = ParseLocomo(ss.str(), id);
  if (!r.ok()) return r.status().WithContext(path);
  return r;
}

std::string RenderTurnText(const LocomoTurn& t) {
  std::string s;
  AppendOneLine(t.text, &s);
  if (!t.blip_caption.empty()) {
    if (!s.empty()) s.push_back(' ');
    s.append("[shares ");
    AppendOneLine(t.blip_caption, &s);
    s.push_back(']');
  }
  return s;
}

RenderedConversation RenderConversation(const LocomoConversation& c) {
  RenderedConversation r;
  for (size_t i = 0; i < c.sessions.size(); ++i) {
    const LocomoSession& s = c.sessions[i];
    if (i > 0) r.text.push_back('\n');
    r.text.append("Session " + std::to_string(s.number) + ", ");
    AppendOneLine(s.date_time, &r.text);
    r.text.push_back('\n');
    for (const LocomoTurn& t : s.turns) {
      TurnSpan span{t.dia_id, r.text.size(), 0};
      AppendOneLine(t.speaker, &r.text);
      r.text.append(": ");
      r.text.append(RenderTurnText(t));
      span.end = r.text.size();
      r.turns.push_back(std::move(span));
      r.text.push_back('\n');
    }
  }
  return r;
}

Result<std::vector<LocomoConversation>> LoadLocomoData(const std::vector<std::string>& given) {
  KVMEM_ASSIGN_OR_RETURN(std::vector<std::string> files, ResolveLocomoFiles(given));
  std::vector<LocomoConversation> all;
  for (const std::string& f : files) {
    KVMEM_ASSIGN_OR_RETURN(std::vector<LocomoConversation> convs, LoadLocomoFile(f));
    for (LocomoConversation& c : convs) all.push_back(std::move(c));
  }
  return all;
}

LocomoConversation ConcatConversations(const std::vector<LocomoConversation>& convs, int limit) {
  LocomoConversation all;
  int next_session = 1;
  for (const LocomoConversation& c : convs) {
    all.id += (all.id.empty() ? "" : "+") + c.id;
    if (all.speaker_a.empty()) {
      all.speaker_a = c.speaker_a;
      all.speaker_b = c.speaker_b;
    }
    std::map<std::string, std::string> renamed;  // old dia_id -> new
    for (const LocomoSession& s : c.sessions) {
      LocomoSession ns = s;
      ns.number = next_session++;
      for (size_t i = 0; i < ns.turns.size(); ++i) {
        const std::string id = "D" + std::to_string(ns.number) + ":" + std::to_string(i + 1);
        renamed[s.turns[i].dia_id] = id;
        ns.turns[i].dia_id = id;
      }
      all.sessions.push_back(std::move(ns));
    }
    const size_t n_qa = limit > 0 ? std::min<size_t>(limit, c.qa.size()) : c.qa.size();
    for (size_t q = 0; q < n_qa; ++q) {
      LocomoQa qa = c.qa[q];
      for (std::string& e : qa.evidence) {
        auto it = renamed.find(e);
        // Evidence naming no turn of its conversation stays unmatched under a name no turn has.
        e = it != renamed.end() ? it->second : c.id + "/" + e;
      }
      all.qa.push_back(std::move(qa));
    }
  }
  return all;
}

}  // namespace kvmem::eval
