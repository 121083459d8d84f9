// Token ids in the sampler's order, highest logit first and ties in ascending id, brought into order only as far
// as someone asks: a cut that keeps a few hundred tokens of 128k sorts those few hundred, not the vocabulary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "troupe/ids.hpp"

namespace troupe::runtime {

class ordered_selection {
 public:
  // Starts over on a row of logits, nothing taken. The row must hold no NaN and no +inf (so that the order is a
  // total one, the same as a stable sort by `>` gives), and must not change while the selection is in use.
  void reset(std::span<const float> logits);

  // The ids taken so far: the head of the order, in order.
  std::span<const token_id> ids() const { return ids_; }
  bool complete() const { return ids_.size() == logits_.size(); }
  // Nothing more can be taken: complete, or closed by take_best.
  bool exhausted() const { return closed_ || complete(); }

  // Takes every id not yet taken whose logit is >= bound. Each take reaches lower than the last, so the ids taken
  // before all come first in the order and ids() stays its head. Returns how many it took.
  std::size_t take_down_to(float bound);

  // Takes the ids with the highest logit not yet taken: one id, or all its ties. Returns how many (0: complete).
  std::size_t take_next();

  // On a fresh selection: takes the n best ids (n <= the row's size). The selection is then closed: n is where
  // top-k cuts, and nothing below it is ever asked for.
  void take_best(std::size_t n);

 private:
  // Sorts keys and appends their ids; `in_id_order`: they were gathered in ascending id order.
  void append_sorted(std::span<std::uint64_t> keys, bool in_id_order);

  std::span<const float> logits_;
  std::vector<token_id> ids_;
  float floor_ = 0.0f; // every id whose logit is >= floor_ has been taken
  bool closed_ = false;
  std::vector<std::uint64_t> keys_, scratch_; // buffers for a band's keys
};

} // namespace troupe::runtime
