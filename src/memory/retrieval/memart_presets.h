// MemArt's presets: retrieval heads are a property of the model, so the evaluated configuration
// (README "Memory policies", docs/eval/memart.md) is kept per model, keyed by the GGUF's
// fingerprint. Two ship (SmolLM2-135M-Instruct Q4_1 and Gemma-3-270M Q4_K_M, the files
// scripts/install_deps.sh fetches); `kvmem calibrate memart -m MODEL` writes one for any other
// model into the presets directory (<store root>/presets/memart-<fingerprint>.json).
// Thread-safety: pure functions (file reads and writes are atomic renames).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/status.h"

namespace kvmem::memory {

// A preset as config fields: {"block_size", "top_k", "strategy", "neighbors", "heads"}.
struct MemArtPreset {
  std::string source;  // "shipped: <model>" or the calibrated file's path
  nlohmann::json fields;
};

// The calibrated preset in presets_dir, else the shipped one for `fingerprint`; nullopt: none.
// A calibrated file that cannot be read or holds other fields is an error (never ignored).
Result<std::optional<MemArtPreset>> FindMemArtPreset(const std::string& presets_dir,
                                                     const std::string& fingerprint);

std::string CalibratedPresetPath(const std::string& presets_dir, const std::string& fingerprint);
// Writes `fields` (checked as a memart config) as the model's calibrated preset.
Status WriteCalibratedPreset(const std::string& presets_dir, const std::string& fingerprint,
                             const nlohmann::json& fields);

}  // namespace kvmem::memory
