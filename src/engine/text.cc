#include "engine/text.h"

#include <algorithm>

namespace tachyon {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(
      std::remove_if(stops_.begin(), stops_.end(), [](const std::string& s) { return s.empty(); }),
      stops_.end());
}

StopStringMatcher::Result StopStringMatcher::push(std::string_view piece) {
  Result r;
  if (stopped_) {
    r.stopped = true;
    return r;
  }
  if (stops_.empty()) {
    r.emit.assign(piece);
    return r;
  }
  // Any stop string that occurs starts inside the held text or the new piece: emitted
  // text never ends with a prefix of a stop string.
  std::string text = held_;
  text.append(piece);
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, text.find(s));
  if (first != std::string::npos) {
    r.emit = text.substr(0, first);
    r.stopped = stopped_ = true;
    held_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t most = std::min(text.size(), s.size() - 1);
    for (size_t len = most; len > hold; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  r.emit = text.substr(0, text.size() - hold);
  held_ = text.substr(text.size() - hold);
  return r;
}

std::string StopStringMatcher::flush() {
  std::string out;
  out.swap(held_);
  return stopped_ ? std::string() : out;
}

}  // namespace tachyon
