#include "serve/ui_assets.h"

#include <vector>

namespace kvmem::serve {
namespace {

struct EmbeddedFile {
  const char* name;
  const unsigned char* bytes;
  size_t size;
};

#include "serve/ui_files.inc"  // kEmbeddedFiles, generated from ui/

std::string_view ContentType(std::string_view name) {
  const size_t dot = name.rfind('.');
  const std::string_view ext = dot == std::string_view::npos ? "" : name.substr(dot + 1);
  if (ext == "html") return "text/html; charset=utf-8";
  if (ext == "js") return "text/javascript; charset=utf-8";
  if (ext == "css") return "text/css; charset=utf-8";
  if (ext == "svg") return "image/svg+xml";
  if (ext == "png") return "image/png";
  return "application/octet-stream";
}

const std::vector<UiAsset>& Assets() {
  static const std::vector<UiAsset> assets = [] {
    std::vector<UiAsset> out;
    for (const EmbeddedFile& f : kEmbeddedFiles) {
      out.push_back({f.name, ContentType(f.name),
                     std::string_view(reinterpret_cast<const char*>(f.bytes), f.size)});
    }
    return out;
  }();
  return assets;
}

}  // namespace

const UiAsset* FindUiAsset(std::string_view path) {
  if (path == "/ui" || path == "/ui/") path = "/ui/index.html";
  if (!path.starts_with("/ui/")) return nullptr;
  path.remove_prefix(4);
  for (const UiAsset& a : Assets()) {
    if (a.name == path) return &a;
  }
  return nullptr;
}

}  // namespace kvmem::serve
