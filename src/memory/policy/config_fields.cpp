#include "memory/policy/config_fields.h"

#include <algorithm>
#include <cmath>

namespace kvmem::memory {
namespace {

using Json = nlohmann::json;

std::string Bound(double v) {
  if (v == std::floor(v) && std::abs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  return s;
}

std::string Range(const ConfigField& f) { return "[" + Bound(f.min) + ", " + Bound(f.max) + "]"; }

std::string Choices(const ConfigField& f) {
  std::string s;
  for (const std::string& c : f.choices) s += (s.empty() ? "" : ", ") + c;
  return s;
}

Status CheckValue(const ConfigField& f, const Json& v, const std::string& where) {
  switch (f.type) {
    case ConfigField::Type::kInt: {
      const bool integral = v.is_number_integer() ||
                            (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
      if (!integral || v.get<double>() < f.min || v.get<double>() > f.max) {
        return InvalidArgument(where + " must be an integer in " + Range(f));
      }
      return Status::Ok();
    }
    case ConfigField::Type::kNumber:
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < f.min ||
          v.get<double>() > f.max) {
        return InvalidArgument(where + " must be a number in " + Range(f));
      }
      return Status::Ok();
    case ConfigField::Type::kBool:
      if (!v.is_boolean()) return InvalidArgument(where + " must be true or false");
      return Status::Ok();
    case ConfigField::Type::kString: {
      if (!v.is_string()) return InvalidArgument(where + " must be a string");
      const std::string& s = v.get_ref<const std::string&>();
      if (!f.choices.empty()) {
        if (std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end()) {
          return InvalidArgument(where + " must be one of: " + Choices(f));
        }
      } else if (s.empty() || static_cast<int>(s.size()) > f.max_chars) {
        return InvalidArgument(where + " must be 1 to " + std::to_string(f.max_chars) +
                               " characters");
      }
      return Status::Ok();
    }
    case ConfigField::Type::kStringList: {
      if (!v.is_array() || static_cast<double>(v.size()) > f.max) {
        return InvalidArgument(where + " must be an array of at most " + Bound(f.max) +
                               " strings");
      }
      for (const Json& item : v) {
        if (!item.is_string() || item.get_ref<const std::string&>().empty() ||
            static_cast<int>(item.get_ref<const std::string&>().size()) > f.max_chars) {
          return InvalidArgument(where + " must hold strings of 1 to " +
                                 std::to_string(f.max_chars) + " characters");
        }
      }
      return Status::Ok();
    }
  }
  return Internal("config field type");
}

const char* TypeName(ConfigField::Type t) {
  switch (t) {
    case ConfigField::Type::kInt: return "integer";
    case ConfigField::Type::kNumber: return "number";
    case ConfigField::Type::kBool: return "boolean";
    case ConfigField::Type::kString: return "string";
    case ConfigField::Type::kStringList: return "array of strings";
  }
  return "?";
}

}  // namespace

Result<Json> ReadConfig(std::string_view policy, std::span<const ConfigField> fields,
                        const Json& config, const Json& base) {
  const std::string who = std::string(policy) + " config";
  if (!config.is_object()) return InvalidArgument(who + " must be a JSON object");
  for (const auto& item : config.items()) {
    // A plain name, not a structured binding: clang 14 (the fuzz build) cannot capture those.
    const std::string& key = item.key();
    const bool known = std::any_of(fields.begin(), fields.end(),
                                   [&](const ConfigField& f) { return f.name == key; });
    if (!known) {
      std::string names;
      for (const ConfigField& f : fields) names += (names.empty() ? "" : ", ") + f.name;
      return InvalidArgument(who + ": unknown field '" + key + "'" +
                             (names.empty() ? " (this policy takes none)"
                                            : " (fields: " + names + ")"));
    }
  }
  Json out = Json::object();
  for (const ConfigField& f : fields) {
    const bool given = config.contains(f.name);
    const Json& v = given ? config[f.name] : base.at(f.name);
    KVMEM_RETURN_IF_ERROR(CheckValue(f, v, who + ": '" + f.name + "'"));
    out[f.name] = f.type == ConfigField::Type::kInt ? Json(v.get<int64_t>()) : v;
  }
  return out;
}

Json DefaultConfig(std::span<const ConfigField> fields) {
  Json out = Json::object();
  for (const ConfigField& f : fields) out[f.name] = f.default_value;
  return out;
}

nlohmann::ordered_json DescribeFields(std::span<const ConfigField> fields) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const ConfigField& f : fields) {
    nlohmann::ordered_json d;
    d["type"] = TypeName(f.type);
    d["default"] = f.default_value;
    if (f.type == ConfigField::Type::kInt) {
      d["min"] = static_cast<int64_t>(f.min);
      d["max"] = static_cast<int64_t>(f.max);
    } else if (f.type == ConfigField::Type::kNumber) {
      d["min"] = f.min;
      d["max"] = f.max;
    }
    if (f.type == ConfigField::Type::kStringList) d["max_items"] = static_cast<int64_t>(f.max);
    if (!f.choices.empty()) d["choices"] = f.choices;
    d["description"] = f.description;
    out[f.name] = std::move(d);
  }
  return out;
}

}  // namespace kvmem::memory
