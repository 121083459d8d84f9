// The CUDA runner's sampler: one copy in, edits and penalties, the draw, log-probabilities, one copy out.
#include "runtime/cuda/cuda_row_sampler.hpp"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/logprobs.hpp"
#include "kernels/cuda/penalties.hpp"
#include "kernels/cuda/sampling.hpp"
#include "runtime/cuda_memory_plan.hpp"

namespace troupe::runtime {

namespace kc = kernels::cuda;

static_assert(kc::max_top_logprobs == max_logprobs, "the device returns at most max_logprobs alternatives");

namespace {
// Where each array sits in the buffer that goes to the device.
struct in_layout {
  std::size_t penalties = 0, logprobs = 0, tokens = 0, edits = 0, bytes = 0;
};
in_layout layout_of(std::size_t rows, std::size_t edited, std::size_t scored, std::size_t tokens, std::size_t edits) {
  in_layout l;
  l.penalties = round_up(rows * sizeof(kc::sample_row_params), 16);
  l.logprobs = l.penalties + round_up(edited * sizeof(kc::penalty_row), 16);
  l.tokens = l.logprobs + round_up(scored * sizeof(kc::logprob_row), 16);
  l.edits = l.tokens + round_up(tokens * sizeof(std::int32_t), 16);
  l.bytes = l.edits + round_up(edits * sizeof(kc::logit_edit), 16);
  return l;
}
} // namespace

cuda_row_sampler::cuda_row_sampler(int rows) {
  const auto n = static_cast<std::size_t>(std::max(rows, 1));
  reserve(layout_of(n, 0, 0, 0, 0).bytes, round_up(n * sizeof(std::int32_t), 16));
}

void cuda_row_sampler::reserve(std::size_t in_bytes, std::size_t out_bytes) {
  // Only between steps: the previous step has synchronised, nothing reads the old buffers.
  if (in_bytes > in_host_.bytes()) {
    in_host_ = kc::pinned_buffer<std::byte>(in_bytes);
    in_device_ = kc::device_buffer<std::byte>(in_bytes);
  }
  if (out_bytes > out_host_.bytes()) {
    out_host_ = kc::pinned_buffer<std::byte>(out_bytes);
    out_device_ = kc::device_buffer<std::byte>(out_bytes);
  }
}

std::size_t cuda_row_sampler::logits_rows_needed(std::span<const device_sample> rows) {
  std::size_t needed = rows.size();
  for (const auto& r : rows)
    needed += (r.penalised() ? 1 : 0) + (r.edited() && r.logprobs >= 0 ? 1 : 0);
  return needed;
}

void cuda_row_sampler::launch(float* logits, int vocab, std::span<const device_sample> rows, cudaStream_t stream,
                              cuda_step_status& status) {
  const std::size_t n = rows.size();
  std::size_t edited = 0, scored = 0, tokens = 0, edits = 0;
  int max_top_n = 0;
  for (const auto& r : rows) {
    max_top_n = std::max(max_top_n, std::min(r.logprobs, kc::max_top_logprobs));
    edited += r.edited() ? 1 : 0;
    tokens += r.penalised() ? r.history.size() : 0;
    edits += r.edits.bias.size() + r.edits.banned.size();
    scored += r.logprobs >= 0 ? 1 : 0;
  }
  const in_layout in = layout_of(n, edited, scored, tokens, edits);
  logprobs_offset_ = round_up(n * sizeof(std::int32_t), 16);
  reserve(in.bytes, logprobs_offset_ + scored * sizeof(kc::logprob_result));

  std::byte* host = in_host_.data();
  auto* params = reinterpret_cast<kc::sample_row_params*>(host);
  auto* penalties = reinterpret_cast<kc::penalty_row*>(host + in.penalties);
  auto* scoring = reinterpret_cast<kc::logprob_row*>(host + in.logprobs);
  auto* history = reinterpret_cast<std::int32_t*>(host + in.tokens);
  auto* edit_list = reinterpret_cast<kc::logit_edit*>(host + in.edits);
  // Scratch rows follow the rows sampled: each penalised row's token counts, each edited row's raw copy.
  auto next_scratch = static_cast<std::int32_t>(n);
  std::int32_t token_at = 0, edit_at = 0;
  std::size_t p = 0, s = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& r = rows[i];
    const auto row = static_cast<std::int32_t>(i);
    params[i] = {row, r.temperature, r.top_k, r.top_p, r.min_p, r.u, r.score_target};
    std::int32_t raw_row = row;
    if (r.edited()) {
      kc::penalty_row& pen = penalties[p++];
      pen = {};
      pen.logits_row = row;
      if (r.penalised()) {
        pen.scratch_row = next_scratch++;
        pen.token_begin = token_at;
        pen.token_count = static_cast<std::int32_t>(r.history.size());
        pen.prompt_len = std::min(r.prompt_len, pen.token_count);
        pen.repetition = r.repetition_penalty;
        pen.frequency = r.frequency_penalty;
        pen.presence = r.presence_penalty;
        std::memcpy(history + token_at, r.history.data(), r.history.size_bytes());
        token_at += pen.token_count;
      }
      pen.copy_row = r.logprobs >= 0 ? next_scratch++ : -1;
      pen.edit_begin = edit_at;
      pen.bias_count = static_cast<std::int32_t>(r.edits.bias.size());
      pen.ban_count = static_cast<std::int32_t>(r.edits.banned.size());
      for (const auto& b : r.edits.bias)
        edit_list[edit_at++] = {b.id, b.bias};
      for (auto id : r.edits.banned)
        edit_list[edit_at++] = {id, 0.0f};
      raw_row = pen.copy_row >= 0 ? pen.copy_row : row;
    }
    if (r.logprobs >= 0)
      scoring[s++] = {raw_row, row, std::min(r.logprobs, kc::max_top_logprobs)};
  }

  const auto step = [&](cudaError_t e, const char* what) {
    if (status.ok() && e != cudaSuccess)
      status = {static_cast<int>(e), what, false};
  };
  auto* device = in_device_.data();
  auto* tokens_out = reinterpret_cast<std::int32_t*>(out_device_.data());
  if (status.ok())
    step(cudaMemcpyAsync(device, host, in.bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (sampling rows)");
  if (status.ok() && edited > 0)
    step(kc::apply_penalties(logits, vocab, reinterpret_cast<const kc::penalty_row*>(device + in.penalties),
                             static_cast<int>(edited), reinterpret_cast<const std::int32_t*>(device + in.tokens),
                             reinterpret_cast<const kc::logit_edit*>(device + in.edits), stream),
         "apply_penalties");
  if (status.ok())
    step(kc::sample_rows(logits, vocab, reinterpret_cast<const kc::sample_row_params*>(device), static_cast<int>(n),
                         tokens_out, stream),
         "sample_rows");
  if (status.ok() && scored > 0)
    step(kc::compute_logprobs(logits, vocab, reinterpret_cast<const kc::logprob_row*>(device + in.logprobs),
                              static_cast<int>(scored), max_top_n, tokens_out,
                              reinterpret_cast<kc::logprob_result*>(out_device_.data() + logprobs_offset_), stream),
         "compute_logprobs");
  if (status.ok())
    step(cudaMemcpyAsync(out_host_.data(), out_device_.data(), logprobs_offset_ + scored * sizeof(kc::logprob_result),
                         cudaMemcpyDeviceToHost, stream),
         "cudaMemcpyAsync (sampled tokens)");
  vocab_ = vocab;
}

void cuda_row_sampler::collect(std::span<const device_sample> rows, std::span<token_id> tokens,
                               std::span<token_logprobs> logprobs) const {
  std::memcpy(tokens.data(), out_host_.data(), rows.size() * sizeof(std::int32_t));
  const auto* results = reinterpret_cast<const kc::logprob_result*>(out_host_.data() + logprobs_offset_);
  std::size_t s = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].logprobs < 0)
      continue;
    const kc::logprob_result& r = results[s++];
    if (logprobs.empty())
      continue;
    token_logprobs& out = logprobs[i];
    out.token = tokens[i];
    out.logprob = r.logprob;
    const int n = std::min({rows[i].logprobs, kc::max_top_logprobs, vocab_});
    out.top_ids.assign(r.top_ids, r.top_ids + n);
    out.top_logprobs.assign(r.top_logprobs, r.top_logprobs + n);
  }
}

} // namespace troupe::runtime
