// The schema is compiled top-down into named GBNF rules; every subschema becomes an expression,
// objects and arrays get rules of their own, and each $ref target is one rule named before it is
// compiled, so recursive references close over themselves.
#include "engine/grammar/json_schema.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvmem::engine::grammar {
namespace {

using Json = nlohmann::ordered_json;

// The rules every schema may use, defined once in each grammar (only those referenced are
// emitted). "ws" is the whitespace around structure, "sep" the one after ':' and ','; both,
// and the escapes "char" takes, depend on the spelling (SpelledPrimitive).
const std::map<std::string, std::string>& Primitives() {
  static const std::map<std::string, std::string> kRules = {
      {"ws", "\"\" | \" \" | \"\\n\" [ \\t]{0,40}"},
      {"sep", "ws"},
      {"char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})"},
      {"string", "\"\\\"\" char* \"\\\"\""},
      {"integer", "\"-\"? (\"0\" | [1-9] [0-9]{0,15})"},
      {"number", "integer (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?"},
      {"boolean", "\"true\" | \"false\""},
      {"null", "\"null\""},
      {"value", "object | array | string | number | boolean | null"},
      {"object",
       "\"{\" ws (string ws \":\" sep value ws (\",\" sep string ws \":\" sep value ws)*)? \"}\""},
      {"array", "\"[\" ws (value ws (\",\" sep value ws)*)? \"]\""},
  };
  return kRules;
}

// Which primitives each primitive uses.
const std::map<std::string, std::vector<std::string>>& PrimitiveDeps() {
  static const std::map<std::string, std::vector<std::string>> kDeps = {
      {"string", {"char"}},
      {"number", {"integer"}},
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"sep", {"ws"}},
      {"object", {"ws", "sep", "string", "value"}},
      {"array", {"ws", "sep", "value"}},
  };
  return kDeps;
}

// The body of `primitive` in `spelling`. One spelling (kCompact, kPython) has one escape per
// character too: the short ones where JSON has them, else \u00XX for control characters.
std::string SpelledPrimitive(const std::string& primitive, JsonSpelling spelling) {
  if (spelling == JsonSpelling::kFree) return Primitives().at(primitive);
  if (primitive == "ws") return "\"\"";
  if (primitive == "sep") return spelling == JsonSpelling::kPython ? "\" \"" : "\"\"";
  if (primitive == "char") {
    // \u0008-\u000a, \u000c and \u000d have short escapes.
    return "[^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\bfnrt] | "
           "\"\\\\u00\" (\"0\" [0-7bef] | \"1\" [0-9a-f])";
  }
  return Primitives().at(primitive);
}

// Keywords that constrain nothing we generate.
const std::set<std::string>& Annotations() {
  static const std::set<std::string> k = {
      "title",    "description", "default",  "examples",         "format",
      "$schema",  "$id",         "$comment", "$defs",            "definitions",
      "readOnly", "writeOnly",   "deprecated", "contentEncoding", "contentMediaType",
      "strict",
  };
  return k;
}

const std::set<std::string>& Handled() {
  static const std::set<std::string> k = {
      "type",      "properties", "required", "additionalProperties", "items", "minItems",
      "maxItems",  "minLength",  "maxLength", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
  };
  return k;
}

// A GBNF string literal for `bytes` (valid UTF-8).
std::string Literal(std::string_view bytes) {
  std::string out = "\"";
  for (char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Dump(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

bool MatchesType(const Json& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number_integer() || v.is_number_unsigned();
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, JsonSpelling spelling) : root_(root), spelling_(spelling) {}

  Result<std::string> Run() {
    KVMEM_ASSIGN_OR_RETURN(std::string expr, Visit(root_, "", "root", 0));
    std::string out = "root ::= " + expr + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    std::set<std::string> emitted;
    std::vector<std::string> todo(used_.begin(), used_.end());
    while (!todo.empty()) {
      std::string p = todo.back();
      todo.pop_back();
      if (!emitted.insert(p).second) continue;
      out += p + " ::= " + SpelledPrimitive(p, spelling_) + "\n";
      auto it = PrimitiveDeps().find(p);
      if (it != PrimitiveDeps().end()) todo.insert(todo.end(), it->second.begin(), it->second.end());
    }
    if (out.size() > kMaxGrammarBytes) {
      return InvalidArgument("the schema compiles to a grammar larger than " +
                             std::to_string(kMaxGrammarBytes) + " bytes");
    }
    return out;
  }

 private:
  static Status Error(const std::string& path, const std::string& what) {
    return InvalidArgument("JSON schema at '" + (path.empty() ? std::string("/") : path) +
                           "': " + what);
  }

  std::string Use(const std::string& primitive) {
    used_.insert(primitive);
    return primitive;
  }

  // A new rule name from `hint` ("root-items", "User"); names are [a-zA-Z0-9-].
  std::string NewName(const std::string& hint) {
    std::string base;
    for (char c : hint) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      base += ok ? c : '-';
    }
    if (base.empty()) base = "r";
    base = "s-" + base.substr(0, 48);  // "s-" keeps clear of the primitives' names
    int& n = suffix_[base];
    std::string name = n == 0 ? base : base + "-" + std::to_string(n + 1);
    while (!names_.insert(name).second) name = base + "-" + std::to_string(++n + 1);
    ++n;
    return name;
  }

  std::string AddRule(const std::string& hint, std::string body) {
    std::string name = NewName(hint);
    rules_.emplace_back(name, std::move(body));
    return name;
  }

  Status CheckKeywords(const Json& s, const std::string& path) {
    for (const auto& [key, value] : s.items()) {
      if (Annotations().count(key) || Handled().count(key) || key.rfind("x-", 0) == 0) continue;
      return Error(path, "keyword '" + key + "' is not supported");
    }
    return Status::Ok();
  }

  Result<int> ReadCount(const Json& s, const char* key, const std::string& path, int fallback) {
    if (!s.contains(key)) return fallback;
    const Json& v = s[key];
    if (!v.is_number_integer() && !v.is_number_unsigned()) {
      return Error(path, std::string("'") + key + "' must be a non-negative integer");
    }
    if (v.is_number_integer() && v.get<int64_t>() < 0) {
      return Error(path, std::string("'") + key + "' must be a non-negative integer");
    }
    if (v.get<uint64_t>() > static_cast<uint64_t>(kMaxRepetition)) {
      return Error(path, std::string("'") + key + "' above the limit of " +
                             std::to_string(kMaxRepetition));
    }
    return static_cast<int>(v.get<uint64_t>());
  }

  // The GBNF expression for the values schema `s` allows.
  Result<std::string> Visit(const Json& s, const std::string& path, const std::string& hint,
                            int depth) {
    if (depth > kMaxSchemaDepth) {
      return Error(path, "schemas nested deeper than " + std::to_string(kMaxSchemaDepth));
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return Use("value");
      return Error(path, "schema 'false' allows no value");
    }
    if (!s.is_object()) return Error(path, "a schema must be an object or a boolean");
    KVMEM_RETURN_IF_ERROR(CheckKeywords(s, path));
    if (s.contains("$ref")) return VisitRef(s, path, depth);
    if (s.contains("const") || s.contains("enum")) return VisitEnum(s, path);
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (s.contains(key)) return VisitAnyOf(s, key, path, hint, depth);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& e : t) {
          if (!e.is_string()) return Error(path, "'type' must name types");
          types.push_back(e.get<std::string>());
        }
      } else {
        return Error(path, "'type' must be a type name or a non-empty array of them");
      }
    } else if (s.contains("properties") || s.contains("required") ||
               s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength")) {
      types.push_back("string");
    } else {
      return Use("value");
    }
    std::string alts;
    for (const std::string& t : types) {
      KVMEM_ASSIGN_OR_RETURN(std::string e, VisitType(s, t, path, hint, depth));
      alts += (alts.empty() ? "" : " | ") + e;
    }
    return types.size() == 1 ? alts : "(" + alts + ")";
  }

  Result<std::string> VisitType(const Json& s, const std::string& type, const std::string& path,
                                const std::string& hint, int depth) {
    if (type == "integer" || type == "number" || type == "boolean" || type == "null") {
      return Use(type);
    }
    if (type == "string") return VisitString(s, path);
    if (type == "array") return VisitArray(s, path, hint, depth);
    if (type == "object") return VisitObject(s, path, hint, depth);
    return Error(path, "unknown type '" + type + "'");
  }

  Result<std::string> VisitString(const Json& s, const std::string& path) {
    KVMEM_ASSIGN_OR_RETURN(int min, ReadCount(s, "minLength", path, 0));
    KVMEM_ASSIGN_OR_RETURN(int max, ReadCount(s, "maxLength", path, -1));
    if (max >= 0 && max < min) return Error(path, "maxLength below minLength");
    if (min == 0 && max < 0) return Use("string");
    Use("char");
    std::string rep = "{" + std::to_string(min) + "," + (max >= 0 ? std::to_string(max) : "") + "}";
    return "\"\\\"\" char" + rep + " \"\\\"\"";
  }

  Result<std::string> VisitArray(const Json& s, const std::string& path, const std::string& hint,
                                 int depth) {
    if (s.contains("items") && s["items"].is_array()) {
      return Error(path, "'items' as an array (tuples) is not supported");
    }
    std::string item = Use("value");
    if (s.contains("items")) {
      KVMEM_ASSIGN_OR_RETURN(item, Visit(s["items"], path + "/items", hint + "-item", depth + 1));
    }
    KVMEM_ASSIGN_OR_RETURN(int min, ReadCount(s, "minItems", path, 0));
    KVMEM_ASSIGN_OR_RETURN(int max, ReadCount(s, "maxItems", path, -1));
    if (max >= 0 && max < min) return Error(path, "maxItems below minItems");
    Use("ws");
    Use("sep");
    if (max == 0) return AddRule(hint, "\"[\" ws \"]\"");
    const int rest_min = std::max(min - 1, 0);
    const std::string rest =
        max < 0 ? (rest_min == 0 ? "*" : "{" + std::to_string(rest_min) + ",}")
                : "{" + std::to_string(rest_min) + "," + std::to_string(max - 1) + "}";
    std::string items = item + " ws (\",\" sep " + item + " ws)" + rest;
    return AddRule(hint, "\"[\" ws " + (min == 0 ? "(" + items + ")?" : items) + " \"]\"");
  }

  Result<std::string> VisitObject(const Json& s, const std::string& path, const std::string& hint,
                                  int depth) {
    const Json empty = Json::object();
    const Json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) return Error(path, "'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Error(path, "'required' must be an array of names");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) return Error(path, "'required' must be an array of names");
        if (!props.contains(r.get<std::string>())) {
          return Error(path, "required property '" + r.get<std::string>() +
                                 "' is not in 'properties' (not supported)");
        }
        required.insert(r.get<std::string>());
      }
    }
    // Extra properties: absent = false when properties are listed (strict), true otherwise.
    std::string extra_value;
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        KVMEM_ASSIGN_OR_RETURN(extra_value, Visit(a, path + "/additionalProperties",
                                                  hint + "-extra", depth + 1));
      }
    } else if (props.empty()) {
      return Use("object");
    }
    Use("ws");
    Use("sep");
    struct Prop {
      std::string kv;  // rule: "name" ws ":" sep value ws
      bool required = false;
    };
    std::vector<Prop> list;
    std::vector<std::string> names;
    for (const auto& [name, sub] : props.items()) {
      names.push_back(name);
      const std::string sub_path = path + "/properties/" + name;
      if (sub.is_boolean() && !sub.get<bool>()) {
        if (required.count(name)) return Error(sub_path, "a required property with schema false");
        continue;  // may not appear
      }
      KVMEM_ASSIGN_OR_RETURN(std::string value, Visit(sub, sub_path, hint + "-" + name, depth + 1));
      Prop p;
      p.kv = AddRule(hint + "-" + name + "-kv",
                     Literal(Dump(Json(name))) + " ws \":\" sep " + value + " ws");
      p.required = required.count(name) > 0;
      list.push_back(std::move(p));
    }
    // after[i]: the properties from i on, when one came before (so each starts with a comma);
    // first[i]: the same when none came before.
    std::string after_tail = "\"\"", first_tail = "\"\"";
    if (!extra_value.empty()) {
      KVMEM_ASSIGN_OR_RETURN(std::string key, ExtraKey(names, hint, path));
      const std::string kv =
          AddRule(hint + "-extra-kv", key + " ws \":\" sep " + extra_value + " ws");
      after_tail = AddRule(hint + "-extras", "(\",\" sep " + kv + ")*");
      first_tail = AddRule(hint + "-extras-first", "(" + kv + " " + after_tail + ")?");
    }
    std::string after = after_tail, first = first_tail;
    for (size_t i = list.size(); i-- > 0;) {
      const Prop& p = list[i];
      std::string a = "\",\" sep " + p.kv + " " + after;
      std::string f = p.kv + " " + after;
      if (!p.required) {
        a += " | " + after;
        f += " | " + first;
      }
      after = AddRule(hint + "-after", a);
      first = AddRule(hint + "-first", f);
    }
    return AddRule(hint, "\"{\" ws " + first + " \"}\"");
  }

  // A JSON string that is none of `names`: a trie over the names' characters (as written in
  // JSON) where stopping at a node that is not a whole name, or leaving the trie, is allowed.
  Result<std::string> ExtraKey(const std::vector<std::string>& names, const std::string& hint,
                               const std::string& path) {
    Use("char");
    if (names.empty()) return Use("string");
    struct Node {
      std::map<uint32_t, int> children;
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& n : names) {
      std::string written = Dump(Json(n));
      written = written.substr(1, written.size() - 2);
      if (written.find('\\') != std::string::npos) {
        return Error(path, "extra properties next to a listed name that needs escaping (" +
                               Dump(Json(n)) + ") are not supported");
      }
      int at = 0;
      for (uint32_t cp : CodePoints(written)) {
        auto it = trie[at].children.find(cp);
        if (it == trie[at].children.end()) {
          trie.push_back({});
          it = trie[at].children.emplace(cp, static_cast<int>(trie.size()) - 1).first;
        }
        at = it->second;
      }
      trie[at].terminal = true;
    }
    const std::string rest = AddRule(hint + "-key-rest", "char* \"\\\"\"");
    std::vector<std::string> rule_of(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) rule_of[i] = NewName(hint + "-key");
    for (size_t i = 0; i < trie.size(); ++i) {
      std::string body;
      auto alt = [&](const std::string& a) { body += (body.empty() ? "" : " | ") + a; };
      if (!trie[i].terminal) alt("\"\\\"\"");
      std::string excluded;
      for (const auto& [cp, child] : trie[i].children) {
        alt("[" + ClassChar(cp) + "] " + rule_of[child]);
        excluded += ClassChar(cp);
      }
      // Any other character, or an escape (names needing none), leaves the trie.
      alt("[^\"\\\\\\x00-\\x1F" + excluded + "] " + rest);
      alt("\"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) " + rest);
      rules_.emplace_back(rule_of[i], body);
    }
    return "\"\\\"\" " + rule_of[0];
  }

  static std::vector<uint32_t> CodePoints(std::string_view s) {
    std::vector<uint32_t> out;
    for (size_t i = 0; i < s.size();) {
      const auto b = static_cast<unsigned char>(s[i]);
      const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
      uint32_t cp = len == 1 ? b : b & (0x7Fu >> len);
      for (size_t k = 1; k < len && i + k < s.size(); ++k) {
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
      }
      out.push_back(cp);
      i += len;
    }
    return out;
  }

  // Code point `cp` inside a GBNF class.
  static std::string ClassChar(uint32_t cp) {
    char buf[16];
    if (cp == ']' || cp == '\\' || cp == '^' || cp == '-' || cp == '"') {
      return std::string("\\") + static_cast<char>(cp);
    }
    if (cp >= 0x20 && cp < 0x7F) return std::string(1, static_cast<char>(cp));
    std::snprintf(buf, sizeof(buf), cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", cp);
    return buf;
  }

  Result<std::string> VisitRef(const Json& s, const std::string& path, int depth) {
    for (const auto& [key, value] : s.items()) {
      if (key != "$ref" && !Annotations().count(key)) {
        return Error(path, "keyword '" + key + "' next to '$ref' is not supported");
      }
    }
    if (!s["$ref"].is_string()) return Error(path, "'$ref' must be a string");
    const std::string ref = s["$ref"].get<std::string>();
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    const Json* target = nullptr;
    if (ref == "#") {
      target = &root_;
    } else if (ref.rfind("#/$defs/", 0) == 0 || ref.rfind("#/definitions/", 0) == 0) {
      try {
        const Json::json_pointer ptr(ref.substr(1));
        if (root_.contains(ptr)) target = &root_.at(ptr);
      } catch (const std::exception&) {
        target = nullptr;
      }
      if (target == nullptr) return Error(path, "'$ref' " + Quoted(ref) + " names nothing");
    } else {
      return Error(path, "'$ref' " + Quoted(ref) +
                             " is not supported (only \"#\", \"#/$defs/...\", \"#/definitions/...\")");
    }
    const std::string name = NewName(ref == "#" ? "root" : ref.substr(ref.rfind('/') + 1));
    refs_.emplace(ref, name);
    rules_.emplace_back(name, "");
    const size_t slot = rules_.size() - 1;
    KVMEM_ASSIGN_OR_RETURN(std::string body, Visit(*target, ref.substr(1), name, depth + 1));
    rules_[slot].second = body;
    return name;
  }

  static std::string Quoted(const std::string& s) { return "'" + s + "'"; }

  Result<std::string> VisitEnum(const Json& s, const std::string& path) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      if (t.is_array()) {
        for (const Json& e : t) {
          if (e.is_string()) types.push_back(e.get<std::string>());
        }
      }
    }
    for (const auto& [key, value] : s.items()) {
      if (key != "enum" && key != "const" && key != "type" && !Annotations().count(key)) {
        return Error(path, "keyword '" + key + "' next to 'enum'/'const' is not supported");
      }
    }
    std::vector<Json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) return Error(path, "'enum' must be an array");
      for (const Json& v : s["enum"]) values.push_back(v);
    }
    std::string alts;
    for (const Json& v : values) {
      if (s.contains("const") && s.contains("enum") && v != s["const"]) continue;
      bool typed = types.empty();
      for (const std::string& t : types) typed |= MatchesType(v, t);
      if (!typed) continue;
      alts += (alts.empty() ? "" : " | ") + Literal(Dump(v));
    }
    if (alts.empty()) return Error(path, "'enum'/'const' allows no value");
    return "(" + alts + ")";
  }

  Result<std::string> VisitAnyOf(const Json& s, const char* key, const std::string& path,
                                 const std::string& hint, int depth) {
    for (const auto& [k, value] : s.items()) {
      if (k != key && !Annotations().count(k)) {
        return Error(path, "keyword '" + k + "' next to '" + key + "' is not supported");
      }
    }
    const Json& list = s[key];
    if (!list.is_array() || list.empty()) return Error(path, std::string("'") + key +
                                                                 "' must be a non-empty array");
    if (std::string(key) == "allOf" && list.size() != 1) {
      return Error(path, "'allOf' of more than one schema is not supported");
    }
    std::string alts;
    for (size_t i = 0; i < list.size(); ++i) {
      KVMEM_ASSIGN_OR_RETURN(std::string e, Visit(list[i], path + "/" + key + "/" + std::to_string(i),
                                                   hint + "-" + std::to_string(i), depth + 1));
      alts += (alts.empty() ? "" : " | ") + e;
    }
    return "(" + alts + ")";
  }

  const Json& root_;
  JsonSpelling spelling_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_;
  std::map<std::string, int> suffix_;  // base name -> names handed out
  std::set<std::string> used_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

Result<std::string> JsonSchemaToGbnf(std::string_view schema_json, JsonSpelling spelling) {
  Json schema = Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return InvalidArgument("JSON schema: not valid JSON");
  return SchemaCompiler(schema, spelling).Run();
}

std::string JsonObjectGbnf() {
  auto gbnf = JsonSchemaToGbnf(R"({"type": "object"})");
  return std::move(gbnf).value();
}

Result<std::shared_ptr<const Grammar>> CompileJsonSchema(std::string_view schema_json) {
  KVMEM_ASSIGN_OR_RETURN(std::string gbnf, JsonSchemaToGbnf(schema_json));
  Result<Grammar> g = Grammar::Parse(gbnf);
  if (!g.ok()) return g.status().WithContext("compiling the JSON schema's grammar");
  return std::make_shared<const Grammar>(std::move(g).value());
}

std::shared_ptr<const Grammar> CompileJsonObject() {
  auto g = Grammar::Parse(JsonObjectGbnf());
  return std::make_shared<const Grammar>(std::move(g).value());
}

}  // namespace kvmem::engine::grammar
