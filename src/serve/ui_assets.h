// The memory inspector's page: the files of ui/ at the repository root (plain HTML, CSS and
// JavaScript, no build step), embedded into the binary when it is built (cmake/EmbedFiles.cmake)
// so `kvmem serve` serves GET /ui and /ui/{file} with no data directory. The page reads only the
// JSON API (inspector_api.h, agents_api.h, /metrics) with the key the user types.
// Thread-safety: immutable data.
#pragma once

#include <string_view>

namespace kvmem::serve {

struct UiAsset {
  std::string_view name;          // "index.html"
  std::string_view content_type;  // "text/html; charset=utf-8"
  std::string_view body;
};

// The asset a request path names: "/ui" and "/ui/" the page itself (index.html), "/ui/app.js" a
// file; nullptr for anything else (no directories, no "..": names are looked up, not opened).
const UiAsset* FindUiAsset(std::string_view path);

}  // namespace kvmem::serve
