// Step planning: decodes before prefill chunks, the token budget and the seats
// respected, chunked prefill, fcfs and priority order, seat preemption under
// the priority policy, and victims for block shortage.
#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>

#include "runtime/choices.hpp"
#include "runtime/scheduler_policy.hpp"

using namespace troupe::runtime;

namespace {
sequence make_seq(seq_id id, int prompt_len, int priority = 0, std::uint64_t arrival = 0) {
  sequence s;
  s.id = id;
  s.priority = priority;
  s.arrival = arrival ? arrival : id;
  s.tokens.assign(prompt_len, 7);
  s.prompt_len = prompt_len;
  return s;
}

// Marks the plan's work as done and the sequences as running, the way the
// scheduler actor reports a granted, executed step.
void execute(scheduler_policy& p, const step_plan& plan) {
  for (auto id : plan.preempt)
    p.preempted(id, p.config().preemption);
  for (auto id : plan.swap_in)
    p.swapped_in(id);
  for (const auto& w : plan.work) {
    auto& s = p.at(w.id);
    if (s.status == seq_status::waiting)
      p.admitted(w.id, s.num_computed);
    p.computed(w.id, s.num_computed + w.num_tokens);
    if (s.num_computed == static_cast<int>(s.tokens.size()))
      p.append_token(w.id, 9);
  }
}

int tokens_of(const step_plan& plan) {
  int n = 0;
  for (const auto& w : plan.work)
    n += w.num_tokens;
  return n;
}

const scheduled_work* work_for(const step_plan& plan, seq_id id) {
  auto i = std::find_if(plan.work.begin(), plan.work.end(), [&](const scheduled_work& w) { return w.id == id; });
  return i == plan.work.end() ? nullptr : &*i;
}
} // namespace

TEST_CASE("a long prompt is prefilled in chunks while running decodes go first every step") {
  scheduler_policy p({.max_num_seqs = 8, .max_num_batched_tokens = 64});
  for (seq_id id = 1; id <= 4; ++id)
    p.add(make_seq(id, 10));
  execute(p, p.plan()); // 4 x 10 prompt tokens fit in one step
  p.add(make_seq(5, 400));
  int prefilled = 0, steps = 0;
  while (prefilled < 400) {
    auto plan = p.plan();
    REQUIRE(plan.work.size() == 5);
    for (int i = 0; i < 4; ++i) // the four decodes lead, one token each
      CHECK(plan.work[i].num_tokens == 1);
    CHECK(plan.work[4].id == 5);
    CHECK(tokens_of(plan) <= 64);
    prefilled += plan.work[4].num_tokens;
    execute(p, plan);
    ++steps;
  }
  CHECK(prefilled == 400);
  CHECK(steps == 7); // 60 prompt tokens per step beside 4 decodes
  CHECK_FALSE(p.at(5).prefilling());
}

TEST_CASE("decode-aware chunked prefill: beside decodes the prefill chunks share a smaller budget, alone the whole") {
  scheduler_policy p({.max_num_seqs = 8, .max_num_batched_tokens = 64, .max_prefill_tokens_with_decodes = 16});
  // Alone, a prompt takes the whole budget: no decode waits on it.
  p.add(make_seq(1, 100));
  auto first = p.plan();
  REQUIRE(first.work.size() == 1);
  CHECK(first.work[0].num_tokens == 64);
  execute(p, first);
  execute(p, p.plan()); // the last 36 tokens: now it decodes
  REQUIRE_FALSE(p.at(1).prefilling());
  // Two prompts arrive: beside the decode, their chunks share 16 tokens a step, in urgency order.
  p.add(make_seq(2, 20));
  p.add(make_seq(3, 30));
  int steps = 0;
  while (p.at(2).prefilling() || p.at(3).prefilling() || p.at(2).status == seq_status::waiting) {
    const auto plan = p.plan();
    REQUIRE(plan.work.size() >= 2);
    CHECK(plan.work[0].id == 1); // the decode leads, one token
    CHECK(plan.work[0].num_tokens == 1);
    int decodes = 0;
    for (const auto& w : plan.work)
      decodes += p.at(w.id).prefilling() || p.at(w.id).status == seq_status::waiting ? 0 : 1;
    CHECK(tokens_of(plan) - decodes <= 16);
    execute(p, plan);
    ++steps;
  }
  CHECK(steps == 4); // 50 prompt tokens, 16 a step
  // 0 turns it off: the prompt beside the decodes takes the rest of the budget.
  scheduler_policy off({.max_num_seqs = 8, .max_num_batched_tokens = 64});
  off.add(make_seq(1, 4));
  execute(off, off.plan());
  off.add(make_seq(2, 100));
  const auto plan = off.plan();
  REQUIRE(plan.work.size() == 2);
  CHECK(plan.work[1].num_tokens == 63);
}

TEST_CASE("a waiting prompt is budgeted by the tokens its cached prefix leaves to compute") {
  scheduler_policy p({.max_num_seqs = 8, .max_num_batched_tokens = 64});
  for (seq_id id = 1; id <= 4; ++id) {
    auto s = make_seq(id, 56);
    s.cached_hint = 48; // a shared 48-token system prompt is in the prefix cache
    p.add(s);
  }
  auto plan = p.plan();
  REQUIRE(plan.work.size() == 4); // 4 x 8 tokens; budgeted as 56 each, only 2 would fit (56 + 8)
  for (const auto& w : plan.work)
    CHECK(w.num_tokens == 8);
  // Admitted, a sequence is budgeted by what it has computed: the hint no longer counts.
  p.admitted(1, 40); // the cache held less than hoped when it was admitted
  CHECK(p.at(1).num_to_compute() == 16);
  // A hint never leaves less than the last prompt token to compute.
  auto whole = make_seq(9, 16);
  whole.cached_hint = 16;
  p.add(whole);
  CHECK(p.at(9).num_to_compute() == 1);
}

TEST_CASE("seats cap the running sequences, fcfs admits in arrival order and never preempts") {
  scheduler_policy p({.max_num_seqs = 2, .max_num_batched_tokens = 100, .policy = scheduling_policy::fcfs});
  p.add(make_seq(1, 5, 9));
  p.add(make_seq(2, 5, 9));
  p.add(make_seq(3, 5, 0)); // more urgent by priority, but fcfs ignores it
  auto plan = p.plan();
  CHECK(plan.preempt.empty());
  REQUIRE(plan.work.size() == 2);
  CHECK(plan.work[0].id == 1);
  CHECK(plan.work[1].id == 2);
  execute(p, plan);
  plan = p.plan();
  CHECK(plan.preempt.empty());
  CHECK(work_for(plan, 3) == nullptr);
}

TEST_CASE("priority: a more urgent arrival takes the seat of the least urgent, latest running sequence") {
  scheduler_policy p({.max_num_seqs = 2, .max_num_batched_tokens = 100, .policy = scheduling_policy::priority});
  p.add(make_seq(1, 5, 5));
  p.add(make_seq(2, 5, 5));
  execute(p, p.plan());
  p.add(make_seq(3, 5, 0));
  auto plan = p.plan();
  REQUIRE(plan.preempt.size() == 1);
  CHECK(plan.preempt[0] == 2); // same priority as 1, later arrival
  CHECK(work_for(plan, 3) != nullptr);
  CHECK(work_for(plan, 1) != nullptr);
  CHECK(work_for(plan, 2) == nullptr);
  // A less urgent arrival does not preempt.
  execute(p, plan);
  p.add(make_seq(4, 5, 7));
  plan = p.plan();
  CHECK(plan.preempt.empty());
  CHECK(work_for(plan, 4) == nullptr);
}

TEST_CASE("a swapped sequence comes back before less urgent waiting ones and keeps its computed tokens") {
  scheduler_policy p({.max_num_seqs = 1,
                      .max_num_batched_tokens = 100,
                      .policy = scheduling_policy::priority,
                      .preemption = preemption_mode::swap});
  p.add(make_seq(1, 5, 5));
  execute(p, p.plan());
  p.add(make_seq(2, 5, 0));
  auto plan = p.plan();
  REQUIRE(plan.preempt == std::vector<seq_id>{1});
  execute(p, plan);
  CHECK(p.at(1).status == seq_status::swapped);
  CHECK(p.at(1).num_computed == 5);
  p.add(make_seq(3, 5, 6)); // less urgent than the swapped one
  p.remove(2);              // the urgent one finished
  plan = p.plan();
  CHECK(plan.swap_in == std::vector<seq_id>{1});
  REQUIRE(plan.work.size() == 1);
  CHECK(plan.work[0].id == 1);
  CHECK(plan.work[0].num_tokens == 1); // resumes with a decode, nothing recomputed
}

TEST_CASE("recompute preemption sends the sequence back to prefill its prompt and output") {
  scheduler_policy p({.max_num_seqs = 1,
                      .max_num_batched_tokens = 100,
                      .policy = scheduling_policy::priority,
                      .preemption = preemption_mode::recompute});
  p.add(make_seq(1, 5, 5));
  execute(p, p.plan());
  execute(p, p.plan()); // one decode: 7 tokens now, 6 computed
  p.add(make_seq(2, 5, 0));
  auto plan = p.plan();
  execute(p, plan);
  CHECK(p.at(1).status == seq_status::waiting);
  CHECK(p.at(1).num_computed == 0);
  p.remove(2);
  plan = p.plan();
  REQUIRE(plan.work.size() == 1);
  CHECK(plan.work[0].num_tokens == 7); // prompt + both output tokens
}

TEST_CASE("the token budget caps a step and leaves later prefills waiting") {
  scheduler_policy p({.max_num_seqs = 8, .max_num_batched_tokens = 16});
  p.add(make_seq(1, 10));
  p.add(make_seq(2, 10));
  p.add(make_seq(3, 10));
  auto plan = p.plan();
  CHECK(tokens_of(plan) == 16);
  REQUIRE(plan.work.size() == 2);
  CHECK(plan.work[0].num_tokens == 10);
  CHECK(plan.work[1].num_tokens == 6);
}

TEST_CASE("victims for block shortage: the least urgent running sequence, if less urgent than the starving one") {
  scheduler_policy p({.max_num_seqs = 8, .max_num_batched_tokens = 100, .policy = scheduling_policy::priority});
  p.add(make_seq(1, 5, 1));
  p.add(make_seq(2, 5, 3));
  p.add(make_seq(3, 5, 2));
  execute(p, p.plan());
  CHECK(p.victim_for(1) == std::optional<seq_id>{2});
  CHECK(p.victim_for(2) == std::optional<seq_id>{2}); // the least urgent yields itself
  p.add(make_seq(4, 5, 9));                           // waiting and less urgent than all: it waits
  CHECK_FALSE(p.victim_for(4).has_value());
  p.add(make_seq(5, 5, 0)); // waiting and most urgent: someone yields
  CHECK(p.victim_for(5) == std::optional<seq_id>{2});
}

TEST_CASE("fcfs victims are the latest arrivals") {
  scheduler_policy p({.max_num_seqs = 8, .max_num_batched_tokens = 100});
  p.add(make_seq(1, 5, 9));
  p.add(make_seq(2, 5, 0));
  execute(p, p.plan());
  CHECK(p.victim_for(1) == std::optional<seq_id>{2});
}

TEST_CASE(
    "shortage: the least urgent running sequence yields once, the starving ones retry, a lone prompt that cannot fit "
    "is named") {
  scheduler_policy p({8, 2048, scheduling_policy::priority, preemption_mode::swap});
  p.add(make_seq(1, 4, 0));
  p.add(make_seq(2, 4, 5));
  execute(p, p.plan());
  REQUIRE(p.num_running() == 2);
  p.add(make_seq(3, 4, 1));
  p.add(make_seq(4, 4, 2));
  // Sequences 3 and 4 (waiting) starve: 2 (least urgent running) yields once, both retry.
  auto plan = p.plan_for_shortage(std::vector<seq_id>{3, 4}, true);
  CHECK(plan.preempt == std::vector<seq_id>{2});
  CHECK(plan.retry == std::vector<seq_id>{3, 4});
  CHECK(plan.never_fits.empty());
  // The least urgent running sequence starving itself yields to nobody but itself, and does not retry.
  auto self = p.plan_for_shortage(std::vector<seq_id>{2}, true);
  CHECK(self.preempt == std::vector<seq_id>{2});
  CHECK(self.retry.empty());
  // A starving sequence more urgent than nothing running: nobody yields. When nothing runs at all, a
  // waiting one can never fit.
  scheduler_policy idle({8, 2048, scheduling_policy::fcfs, preemption_mode::recompute});
  idle.add(make_seq(7, 4));
  auto none = idle.plan_for_shortage(std::vector<seq_id>{7}, false);
  CHECK(none.preempt.empty());
  CHECK(none.never_fits == std::vector<seq_id>{7});
  CHECK(idle.plan_for_shortage(std::vector<seq_id>{7}, true).never_fits.empty());
}

namespace {
sequence with_choices(seq_id id, int prompt_len, int choices, int priority = 0) {
  auto s = make_seq(id, prompt_len, priority);
  s.params.n = choices;
  s.choices = choices;
  s.seed = 1000 + id;
  return s;
}
} // namespace

TEST_CASE("choices: a request takes a seat per choice, and is admitted whole or waits") {
  scheduler_policy p({.max_num_seqs = 4, .max_num_batched_tokens = 256});
  p.add(make_seq(1, 10));
  p.add(with_choices(2, 10, 4)); // 1 + 4 > 4 seats: waits, and fcfs lets nobody pass it
  p.add(make_seq(3, 10));
  auto plan = p.plan();
  REQUIRE(plan.work.size() == 1);
  CHECK(plan.work[0].id == 1);
  execute(p, plan);
  // With sequence 1 gone, the four choices get the four seats.
  p.remove(1);
  plan = p.plan();
  REQUIRE(plan.work.size() == 1);
  CHECK(plan.work[0].id == 2);
}

TEST_CASE("choices: the prompt stops short of its last token, then the choices fork and each computes it") {
  scheduler_policy p({.max_num_seqs = 8, .max_num_batched_tokens = 256});
  p.add(with_choices(5, 10, 3));
  auto plan = p.plan();
  REQUIRE(plan.work.size() == 1);
  CHECK(plan.work[0].num_tokens == 9); // every choice computes token 10 and samples its own first token
  CHECK_FALSE(p.ready_to_fork(5));
  execute(p, plan);
  REQUIRE(p.ready_to_fork(5));
  const auto children = p.fork_choices(5);
  REQUIRE(children.size() == 2);
  CHECK_FALSE(p.ready_to_fork(5));
  CHECK(p.at(5).choices == 1);
  CHECK(p.num_running() == 3);
  for (int i = 0; i < 2; ++i) {
    const auto& c = p.at(children[static_cast<std::size_t>(i)]);
    CHECK(c.id == choice_seq_id(5, i + 1));
    CHECK(c.seed == choice_seed(1005, i + 1));
    CHECK(c.seed != p.at(5).seed);
    CHECK(c.num_computed == 9);
    CHECK(c.tokens == p.at(5).tokens);
    CHECK(c.status == seq_status::running);
    CHECK(c.choices == 1);
    CHECK(c.arrival == p.at(5).arrival);
  }
  // Next step: three one-token decodes of the last prompt token, none prefilling.
  plan = p.plan();
  CHECK(plan.work.size() == 3);
  for (const auto& w : plan.work)
    CHECK(w.num_tokens == 1);
  CHECK_THROWS_AS(p.fork_choices(5), std::logic_error);
}

TEST_CASE(
    "choices: a parent carried past its last prompt token by a prefix hit still forks; its choices recompute that "
    "token") {
  scheduler_policy p({.max_num_seqs = 8, .max_num_batched_tokens = 256});
  p.add(with_choices(6, 10, 2));
  p.admitted(6, 0);
  p.computed(6, 10); // the cache granted more than the plan asked
  REQUIRE(p.ready_to_fork(6));
  const auto children = p.fork_choices(6);
  REQUIRE(children.size() == 1);
  CHECK(p.at(children[0]).num_computed == 9);
  CHECK(p.at(children[0]).tokens.size() == 10u);
}

TEST_CASE("choices: a one-token prompt is ready to fork before it runs, and its choices wait as it does") {
  scheduler_policy p({.max_num_seqs = 8, .max_num_batched_tokens = 256});
  p.add(with_choices(7, 1, 3));
  REQUIRE(p.ready_to_fork(7));
  const auto children = p.fork_choices(7);
  CHECK(children.size() == 2);
  CHECK(p.num_waiting() == 3);
  for (auto id : children)
    CHECK(p.at(id).num_computed == 0);
}

TEST_CASE("choices under priority: enough less urgent running sequences yield their seats, or none does") {
  scheduler_policy p({.max_num_seqs = 4, .max_num_batched_tokens = 256, .policy = scheduling_policy::priority});
  p.add(make_seq(1, 10, /*priority=*/5));
  p.add(make_seq(2, 10, 5));
  p.add(make_seq(3, 10, 0));
  execute(p, p.plan());
  // Urgent, 3 choices: one free seat, and two less urgent ones yield; the equally urgent 3 keeps its seat.
  p.add(with_choices(4, 10, 3, /*priority=*/0));
  auto plan = p.plan();
  CHECK(plan.preempt.size() == 2);
  CHECK(std::ranges::find(plan.preempt, seq_id{3}) == plan.preempt.end());
  CHECK(work_for(plan, 4) != nullptr);
  // Not urgent enough to take any seat: nobody yields.
  scheduler_policy q({.max_num_seqs = 2, .max_num_batched_tokens = 256, .policy = scheduling_policy::priority});
  q.add(make_seq(1, 10, 0));
  q.add(make_seq(2, 10, 5));
  execute(q, q.plan());
  q.add(with_choices(3, 10, 2, /*priority=*/1)); // would need both seats, but 1 is more urgent than it
  plan = q.plan();
  CHECK(plan.preempt.empty());
  CHECK(work_for(plan, 3) == nullptr);
}

TEST_CASE("choices share an arrival: the higher choice is the less urgent, so a shortage always names a victim") {
  scheduler_policy p({.max_num_seqs = 8, .max_num_batched_tokens = 256});
  p.add(with_choices(9, 10, 4));
  execute(p, p.plan());
  auto children = p.fork_choices(9);
  const std::vector<seq_id> all{9, children[0], children[1], children[2]};
  CHECK(p.more_urgent(p.at(9), p.at(children[0])));
  CHECK(p.more_urgent(p.at(children[0]), p.at(children[2])));
  // Every choice starves for a block: the last choice yields, the others try again.
  const auto shortage = p.plan_for_shortage(all, true);
  CHECK(shortage.preempt == std::vector<seq_id>{children[2]});
  CHECK(shortage.retry == std::vector<seq_id>{9, children[0], children[1]});
}
