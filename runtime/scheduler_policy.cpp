// Step planning. Urgency is (priority, arrival) under the priority policy and
// arrival alone under fcfs; every decision below walks sequences in that order.
#include "runtime/scheduler_policy.hpp"

#include "runtime/choices.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace troupe::runtime {

std::string_view to_string(scheduling_policy p) {
  return p == scheduling_policy::fcfs ? "fcfs" : "priority";
}
std::string_view to_string(preemption_mode m) {
  return m == preemption_mode::swap ? "swap" : "recompute";
}

scheduler_policy::scheduler_policy(scheduler_config cfg) : cfg_(cfg) {
  if (cfg_.max_num_seqs < 1 || cfg_.max_num_batched_tokens < 1)
    throw std::invalid_argument("scheduler_policy: max_num_seqs and max_num_batched_tokens must be >= 1");
}

void scheduler_policy::add(sequence s) {
  s.status = seq_status::waiting;
  auto id = s.id;
  if (!seqs_.emplace(id, std::move(s)).second)
    throw std::logic_error("scheduler_policy: sequence " + std::to_string(id) + " already exists");
}

void scheduler_policy::remove(seq_id id) {
  seqs_.erase(id);
}

sequence& scheduler_policy::at(seq_id id) {
  auto i = seqs_.find(id);
  if (i == seqs_.end())
    throw std::logic_error("scheduler_policy: unknown sequence " + std::to_string(id));
  return i->second;
}

const sequence& scheduler_policy::at(seq_id id) const {
  return const_cast<scheduler_policy*>(this)->at(id);
}

bool scheduler_policy::more_urgent(const sequence& a, const sequence& b) const {
  if (cfg_.policy == scheduling_policy::priority && a.priority != b.priority)
    return a.priority < b.priority;
  // A request's choices share its arrival: the lower choice is the more urgent (their ids say which), so
  // that every pair of sequences is ordered and a shortage always finds its victim.
  if (a.arrival != b.arrival)
    return a.arrival < b.arrival;
  return a.id < b.id;
}

std::size_t scheduler_policy::count(seq_status s) const {
  return static_cast<std::size_t>(
      std::count_if(seqs_.begin(), seqs_.end(), [s](const auto& kv) { return kv.second.status == s; }));
}

std::vector<const sequence*> scheduler_policy::by_urgency(seq_status s) const {
  std::vector<const sequence*> out;
  for (const auto& [id, seq] : seqs_)
    if (seq.status == s)
      out.push_back(&seq);
  std::sort(out.begin(), out.end(), [this](const sequence* a, const sequence* b) { return more_urgent(*a, *b); });
  return out;
}

step_plan scheduler_policy::plan() const {
  step_plan plan;
  auto running = by_urgency(seq_status::running);
  // Candidates for a seat: swapped and waiting sequences, most urgent first.
  auto candidates = by_urgency(seq_status::swapped);
  auto waiting = by_urgency(seq_status::waiting);
  candidates.insert(candidates.end(), waiting.begin(), waiting.end());
  std::stable_sort(candidates.begin(), candidates.end(),
                   [this](const sequence* a, const sequence* b) { return more_urgent(*a, *b); });

  // Budget the running sequences need for their decodes (prefills take what is left).
  int decode_need = static_cast<int>(
      std::count_if(running.begin(), running.end(), [](const sequence* s) { return !s->prefilling(); }));
  // A sequence takes a seat per choice it stands for: a request's choices are admitted together.
  int seats = cfg_.max_num_seqs;
  for (const sequence* s : running)
    seats -= s->choices;
  std::vector<const sequence*> admitted;
  for (const sequence* c : candidates) {
    if (decode_need >= cfg_.max_num_batched_tokens)
      break; // no budget would be left for it
    if (seats < c->choices && cfg_.policy == scheduling_policy::priority) {
      // Seats are short: the least urgent running sequences yield theirs, if enough of them are less urgent.
      int could_free = seats;
      std::size_t victims = 0;
      for (auto it = running.rbegin(); it != running.rend() && could_free < c->choices && more_urgent(*c, **it); ++it) {
        could_free += (*it)->choices;
        ++victims;
      }
      if (could_free >= c->choices) {
        for (; victims > 0; --victims) {
          const sequence* victim = running.back();
          running.pop_back();
          plan.preempt.push_back(victim->id);
          seats += victim->choices;
          if (!victim->prefilling())
            --decode_need;
        }
      }
    }
    if (seats < c->choices)
      break; // candidates are in urgency order: nobody after this one gets a seat either
    seats -= c->choices;
    admitted.push_back(c);
    if (!c->prefilling())
      ++decode_need;
  }

  int budget = cfg_.max_num_batched_tokens;
  auto schedule = [&](const sequence* s) {
    // Before its choices fork, a sequence stops short of its last prompt token: every choice computes that one.
    const int want = s->num_to_compute() - (s->choices > 1 && s->num_to_compute() > 1 ? 1 : 0);
    int n = std::min(want, budget);
    if (n <= 0)
      return false;
    plan.work.push_back({s->id, n});
    budget -= n;
    return true;
  };
  // Decodes first so that running sequences advance every step, then prefill chunks.
  for (const sequence* s : running)
    if (!s->prefilling())
      schedule(s);
  for (const sequence* s : admitted)
    if (s->status == seq_status::swapped && !s->prefilling() && schedule(s))
      plan.swap_in.push_back(s->id);
  // Decode-aware chunked prefill: with decodes in the step, the prefill chunks share a smaller budget.
  if (cfg_.max_prefill_tokens_with_decodes > 0 && !plan.work.empty())
    budget = std::min(budget, cfg_.max_prefill_tokens_with_decodes);
  for (const sequence* s : running)
    if (s->prefilling())
      schedule(s);
  for (const sequence* s : admitted) {
    if (s->status == seq_status::swapped && s->prefilling()) {
      if (schedule(s))
        plan.swap_in.push_back(s->id);
    } else if (s->status == seq_status::waiting) {
      schedule(s);
    }
  }
  return plan;
}

void scheduler_policy::admitted(seq_id id, int cached_tokens) {
  auto& s = at(id);
  s.status = seq_status::running;
  s.num_computed = cached_tokens;
}

void scheduler_policy::swapped_in(seq_id id) {
  at(id).status = seq_status::running;
}

void scheduler_policy::preempted(seq_id id, preemption_mode how) {
  auto& s = at(id);
  if (how == preemption_mode::swap) {
    s.status = seq_status::swapped;
  } else {
    s.status = seq_status::waiting;
    s.num_computed = 0;
  }
}

void scheduler_policy::computed(seq_id id, int total_computed) {
  at(id).num_computed = total_computed;
}

void scheduler_policy::append_token(seq_id id, token_id t) {
  at(id).tokens.push_back(t);
}

bool scheduler_policy::ready_to_fork(seq_id id) const {
  const auto& s = at(id);
  return s.choices > 1 && s.num_computed >= s.prompt_len - 1;
}

std::vector<seq_id> scheduler_policy::fork_choices(seq_id parent) {
  auto& p = at(parent);
  if (!ready_to_fork(parent))
    throw std::logic_error("scheduler_policy: sequence " + std::to_string(parent) + " is not ready to fork");
  std::vector<seq_id> children;
  for (int i = 1; i < p.choices; ++i) {
    sequence c = p;
    c.id = choice_seq_id(parent, i);
    c.seed = choice_seed(p.seed, i);
    c.choices = 1;
    c.tokens.resize(static_cast<std::size_t>(p.prompt_len));
    c.num_computed = std::min(p.num_computed, p.prompt_len - 1);
    if (!seqs_.emplace(c.id, std::move(c)).second)
      throw std::logic_error("scheduler_policy: choice " + std::to_string(i) + " of " + std::to_string(parent) +
                             " already exists");
    children.push_back(choice_seq_id(parent, i));
  }
  at(parent).choices = 1;
  return children;
}

std::optional<seq_id> scheduler_policy::victim_for(seq_id starving) const {
  const auto& s = at(starving);
  const sequence* least = nullptr;
  for (const auto& [id, seq] : seqs_)
    if (seq.status == seq_status::running && (least == nullptr || more_urgent(*least, seq)))
      least = &seq;
  if (least == nullptr)
    return std::nullopt;
  if (least->id == starving || more_urgent(s, *least))
    return least->id;
  return std::nullopt;
}

shortage_plan scheduler_policy::plan_for_shortage(std::span<const seq_id> starving, bool anything_runs) const {
  shortage_plan out;
  std::unordered_set<seq_id> victims;
  for (auto id : starving) {
    if (victims.contains(id)) // already yielding for another starving sequence
      continue;
    auto victim = victim_for(id);
    if (!victim) {
      if (!anything_runs && at(id).status == seq_status::waiting)
        out.never_fits.push_back(id);
      continue;
    }
    // A victim already yielding for another starving sequence is not preempted twice;
    // either way the starving sequence tries again with it gone.
    if (victims.insert(*victim).second)
      out.preempt.push_back(*victim);
    if (*victim != id)
      out.retry.push_back(id);
  }
  return out;
}

} // namespace troupe::runtime
