#include "serve/reply_format.h"

#include <chrono>
#include <random>

namespace kvmem::serve {

std::string NewResponseId(std::string_view prefix) {
  static constexpr char kAlphabet[] =
      "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  // One generator per thread, seeded from the OS once: ids must not repeat across requests
  // or restarts, but they are not secrets.
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(0, sizeof(kAlphabet) - 2);
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id.push_back(kAlphabet[pick(rng)]);
  return id;
}

ResponseMeta NewResponseMeta(std::string_view id_prefix, std::string model) {
  ResponseMeta meta;
  meta.id = NewResponseId(id_prefix);
  meta.created_unix = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  meta.model = std::move(model);
  return meta;
}

nlohmann::json DivergenceJson(const Divergence& d) {
  if (!d.diverged) return nullptr;
  nlohmann::json j = {{"diverged", true}, {"action", memory::OnDivergeName(d.action)}};
  if (!d.checkpoint.empty()) j["checkpoint"] = d.checkpoint;
  if (!d.restored.empty()) j["restored"] = d.restored;
  return j;
}

std::string DivergenceHeaderValue(const Divergence& d) {
  if (!d.diverged) return {};
  std::string v = memory::OnDivergeName(d.action);
  if (!d.checkpoint.empty()) v += "; checkpoint=" + d.checkpoint;
  if (!d.restored.empty()) v += "; restored=" + d.restored;
  return v;
}

}  // namespace kvmem::serve
