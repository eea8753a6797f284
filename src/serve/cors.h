// Cross-origin requests from browsers (the Fetch standard's CORS protocol). A page served from
// another origin may call the API only when `kvmem serve --cors-origin ORIGIN` names that origin
// (or "*": any). Then:
//   * a preflight (OPTIONS with Access-Control-Request-Method) is answered 204 with
//     Access-Control-Allow-Origin, -Methods, -Headers (those the browser asks for) and -Max-Age;
//   * every response to that origin carries Access-Control-Allow-Origin and
//     Access-Control-Expose-Headers (Retry-After), so the page may read it.
// Without the flag, or for another origin, a preflight gets 204 with no Access-Control-* header
// (the browser then refuses the call), and a request that carries the Origin header of another
// site is refused with 403 before it runs: a page cannot make a local server generate, create or
// delete agents through a request the browser sends without a preflight (a "simple" POST). The
// server's own origin (Origin equal to http(s)://Host) and clients that send no Origin (SDKs,
// curl) are not affected. Thread-safe: immutable after construction.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvmem::serve {

class CorsPolicy {
 public:
  CorsPolicy() = default;
  explicit CorsPolicy(std::vector<std::string> allowed_origins)
      : origins_(std::move(allowed_origins)) {}

  // Whether a browser page of `origin` may call the API (the server's own `host` always may).
  bool Allows(std::string_view origin, std::string_view host) const;
  // Whether the response to a page of `origin` gets Access-Control-Allow-Origin.
  bool Grants(std::string_view origin) const;

  // The Access-Control-Allow-Origin value for a granted origin: "*" when any origin is allowed,
  // else the origin itself (responses then also vary by Origin).
  std::string AllowOriginValue(std::string_view origin) const;

  static constexpr const char* kAllowMethods = "GET, POST, PUT, DELETE, OPTIONS";  // PUT: segments
  // Asked for by the official clients and browsers' fetch; sent when a preflight names none.
  static constexpr const char* kAllowHeaders =
      "Authorization, Content-Type, X-Api-Key, X-Agent-Id, Anthropic-Version, Anthropic-Beta";
  static constexpr const char* kMaxAgeSeconds = "600";

 private:
  std::vector<std::string> origins_;  // exact origins ("https://app.example:8443") or "*"
};

}  // namespace kvmem::serve
