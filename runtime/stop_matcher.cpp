// Stop-string matching over a small pending buffer: at most the longest stop
// string minus one byte is ever held back.
#include "runtime/stop_matcher.hpp"

#include <algorithm>

namespace troupe::runtime {

namespace {
// Does some stop string begin with text[from..]? Then that tail must wait.
bool tail_may_start_stop(std::string_view tail, const std::vector<std::string>& stops) {
  return std::any_of(stops.begin(), stops.end(), [&](const std::string& s) {
    return s.size() > tail.size() && std::string_view(s).substr(0, tail.size()) == tail;
  });
}
} // namespace

stop_matcher::stop_matcher(std::vector<std::string> stop_strings) : stops_(std::move(stop_strings)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

stop_matcher::result stop_matcher::push(std::string_view piece, bool may_stop) {
  result out;
  if (stopped_)
    return {"", true};
  pending_.append(piece);
  // Earliest complete stop string wins.
  std::size_t first = std::string::npos;
  if (may_stop)
    for (const auto& s : stops_)
      first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    out.text = pending_.substr(0, first);
    out.stopped = stopped_ = true;
    pending_.clear();
    return out;
  }
  // Emit everything except the longest tail that could still grow into a stop string.
  std::size_t hold_from = pending_.size();
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    if (tail_may_start_stop(std::string_view(pending_).substr(i), stops_)) {
      hold_from = i;
      break;
    }
  }
  out.text = pending_.substr(0, hold_from);
  pending_.erase(0, hold_from);
  return out;
}

std::string stop_matcher::flush() {
  std::string rest;
  rest.swap(pending_);
  return stopped_ ? std::string{} : rest;
}

} // namespace troupe::runtime
