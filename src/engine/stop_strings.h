// Streams generated text while watching for stop strings: text that might be the start of a stop
// string is held back until it is known not to be, so a stop string is never partly printed.
// Not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvmem::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds a piece of generated text; returns the text now safe to emit. After a stop string is
  // found, stopped() is true and the returned text ends just before it.
  std::string Push(std::string_view piece);
  // The held-back remainder at the end of generation (empty once stopped).
  std::string Flush();
  bool stopped() const { return stopped_; }
  // The stop string that matched (empty until stopped).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace kvmem::engine
