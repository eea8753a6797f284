#include "serve/cors.h"

#include <algorithm>

namespace kvmem::serve {

bool CorsPolicy::Grants(std::string_view origin) const {
  return std::any_of(origins_.begin(), origins_.end(),
                     [&](const std::string& o) { return o == "*" || o == origin; });
}

bool CorsPolicy::Allows(std::string_view origin, std::string_view host) const {
  if (!host.empty() &&
      (origin == "http://" + std::string(host) || origin == "https://" + std::string(host))) {
    return true;
  }
  return Grants(origin);
}

std::string CorsPolicy::AllowOriginValue(std::string_view origin) const {
  const bool any = std::find(origins_.begin(), origins_.end(), "*") != origins_.end();
  return any ? "*" : std::string(origin);
}

}  // namespace kvmem::serve
