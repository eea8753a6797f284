// A policy's configuration as a list of typed fields with defaults and bounds: what the table
// serves at GET /v1/policies, and the one reader that validates a config given by a client, a
// command line or a stored manifest. Errors name the field: "memart config: 'top_k' must be an
// integer in [1, 4096]". Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvmem::memory {

struct ConfigField {
  enum class Type { kInt, kNumber, kBool, kString, kStringList };
  std::string name;
  Type type = Type::kInt;
  nlohmann::json default_value;
  double min = 0, max = 0;           // kInt, kNumber: inclusive bounds; kStringList: max items
  std::vector<std::string> choices;  // kString: the values allowed (empty: any of max_chars)
  int max_chars = 64;                // kString, kStringList items
  std::string description;
};

// `config` (a JSON object) read against `fields`: every field present in the result, given
// values over `base` (which must hold every field: the defaults, or a preset over them). Keys
// that are not fields, wrong types, values out of bounds or outside the choices: InvalidArgument
// naming the policy and field.
Result<nlohmann::json> ReadConfig(std::string_view policy, std::span<const ConfigField> fields,
                                  const nlohmann::json& config, const nlohmann::json& base);

// The fields' defaults as one config object.
nlohmann::json DefaultConfig(std::span<const ConfigField> fields);

// {"FIELD": {"type", "default", "min"?, "max"?, "choices"?, "description"}, ...} in field order.
nlohmann::ordered_json DescribeFields(std::span<const ConfigField> fields);

}  // namespace kvmem::memory
