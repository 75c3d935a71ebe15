#include "engine/engine.h"

#include <algorithm>
#include <string>

namespace soartune::engine {

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Backend> backend, const ModelWeights& weights,
                                               const EngineOptions& options) {
  std::unique_ptr<Engine> e(new Engine());
  e->backend_ = std::move(backend);
  e->model_ = weights.config;
  e->options_ = options;
  const LaunchConfig& l = options.launch;
  BackendPlan plan;
  plan.weights = &weights;
  plan.launch = l;
  plan.max_sequences = l.max_running_requests;
  // A step never prefills more than the running sequences can hold, whatever the budget says.
  const int64_t prefill_cap = std::min<int64_t>(l.max_prefill_tokens, int64_t{l.max_running_requests} * options.max_context);
  plan.max_step_tokens = static_cast<int>(prefill_cap) + l.max_running_requests;
  // Generation yields one row a sequence and step; teacher forcing one a scored token of a sequence.
  plan.max_output_rows = plan.max_step_tokens;
  if (options.max_scored_tokens >= 0)
    plan.max_output_rows = static_cast<int>(std::min<int64_t>(
        plan.max_step_tokens, int64_t{l.max_running_requests} * std::max(1, options.max_scored_tokens)));
  plan.max_context = options.max_context;
  plan.kv_pages = options.kv_pages;
  e->max_output_rows_ = plan.max_output_rows;
  if (Status s = e->backend_->prepare(plan); !s.ok()) return s;
  SchedulerConfig sc{l.max_running_requests, l.max_prefill_tokens, l.prefill_max_requests, l.kv_page_size};
  e->scheduler_ = std::make_unique<Scheduler>(sc, e->backend_->kv_pages());
  const std::size_t T = static_cast<std::size_t>(plan.max_step_tokens);
  e->tokens_.reserve(T);
  e->positions_.reserve(T);
  e->output_rows_.reserve(T);
  e->argmax_.assign(T, 0);
  e->seqs_.reserve(static_cast<std::size_t>(l.max_running_requests));
  e->chunk_first_row_.reserve(static_cast<std::size_t>(l.max_running_requests));
  e->batch_.chunks.reserve(static_cast<std::size_t>(l.max_running_requests));
  e->epoch_ = std::chrono::steady_clock::now();
  return e;
}

double Engine::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
}

Result<int64_t> Engine::enqueue(std::unique_ptr<Sequence> seq) {
  if (seq->kv_tokens() + 1 > options_.max_context)
    return Status::Invalid("request: prompt + output of " + std::to_string(seq->kv_tokens() + 1) +
                           " tokens exceeds the engine's max_context " + std::to_string(options_.max_context));
  for (int32_t t : seq->tokens)
    if (t < 0 || t >= model_.vocab) return Status::Invalid("request: token id " + std::to_string(t) + " outside the vocabulary of " + std::to_string(model_.vocab));
  seq->id = next_id_++;
  seq->arrival_s = now();
  seq->outputs.reserve(static_cast<std::size_t>(seq->teacher_forced() ? seq->prompt_len : seq->max_new_tokens));
  seq->token_s.reserve(seq->outputs.capacity());
  seq->tokens.reserve(static_cast<std::size_t>(seq->prompt_len + seq->max_new_tokens));
  const int64_t id = seq->id;
  if (Status s = scheduler_->add(std::move(seq)); !s.ok()) return s;
  return id;
}

Result<int64_t> Engine::add_request(std::vector<int32_t> prompt, int output_len) {
  if (prompt.empty()) return Status::Invalid("request: prompt is empty");
  if (output_len < 1) return Status::Invalid("request: output_len must be at least 1");
  auto s = std::make_unique<Sequence>();
  s->prompt_len = static_cast<int>(prompt.size());
  s->tokens = std::move(prompt);
  s->max_new_tokens = output_len;
  return enqueue(std::move(s));
}

Result<int64_t> Engine::add_teacher_forced(const std::vector<int32_t>& prompt, const std::vector<int32_t>& continuation) {
  if (prompt.empty() || continuation.empty()) return Status::Invalid("request: teacher forcing needs a prompt and a continuation");
  if (options_.max_scored_tokens >= 0 && static_cast<int64_t>(continuation.size()) > options_.max_scored_tokens)
    return Status::Invalid("request: a continuation of " + std::to_string(continuation.size()) +
                           " tokens exceeds the engine's max_scored_tokens " + std::to_string(options_.max_scored_tokens));
  auto s = std::make_unique<Sequence>();
  s->tokens = prompt;
  s->tokens.insert(s->tokens.end(), continuation.begin(), continuation.end() - 1);
  s->prompt_len = static_cast<int>(s->tokens.size());
  s->score_from = static_cast<int>(prompt.size()) - 1;
  return enqueue(std::move(s));
}

Status Engine::step() {
  scheduler_->schedule(&batch_);
  last_ = {static_cast<int>(batch_.chunks.size()), batch_.decode_tokens, batch_.prefill_tokens, batch_.started};
  if (batch_.empty()) return Status::Ok();
  tokens_.clear();
  positions_.clear();
  output_rows_.clear();
  seqs_.clear();
  chunk_first_row_.clear();
  for (const ScheduledChunk& c : batch_.chunks) {
    Sequence& s = *c.seq;
    const int first = static_cast<int>(tokens_.size());
    chunk_first_row_.push_back(static_cast<int>(output_rows_.size()));
    for (int p = c.start; p < c.start + c.len; ++p) {
      tokens_.push_back(s.tokens[static_cast<std::size_t>(p)]);
      positions_.push_back(p);
      const int row = first + (p - c.start);
      if (s.teacher_forced()) {
        if (p >= s.score_from) output_rows_.push_back(row);
      } else if (p == s.prompt_len - 1 || p >= s.prompt_len) {
        output_rows_.push_back(row);   // the last prompt token yields the first output; decode tokens the rest
      }
    }
    seqs_.push_back({s.slot, first, c.len, c.start, std::span<const int32_t>(s.pages)});
  }
  Step st{tokens_, positions_, seqs_, output_rows_, batch_.decode_tokens};
  StepOutput out{std::span<int32_t>(argmax_.data(), output_rows_.size()), {}, {}};
  if (Status s = backend_->forward(st, out); !s.ok()) return s;
  const double t = now();
  for (std::size_t ci = 0; ci < batch_.chunks.size(); ++ci) {
    Sequence& s = *batch_.chunks[ci].seq;
    const int row0 = chunk_first_row_[ci];
    const int row1 = ci + 1 < chunk_first_row_.size() ? chunk_first_row_[ci + 1] : static_cast<int>(output_rows_.size());
    for (int r = row0; r < row1; ++r) {
      const int32_t tok = argmax_[static_cast<std::size_t>(r)];
      s.outputs.push_back(tok);
      s.token_s.push_back(t);
      if (!s.teacher_forced()) s.tokens.push_back(tok);
    }
  }
  scheduler_->complete(batch_);
  return Status::Ok();
}

Status Engine::run_until_idle() {
  while (!idle())
    if (Status s = step(); !s.ok()) return s;
  return Status::Ok();
}

std::vector<FinishedRequest> Engine::take_finished() {
  std::vector<FinishedRequest> out;
  for (auto& s : scheduler_->take_finished())
    out.push_back({s->id, s->prompt_len, std::move(s->outputs), s->arrival_s, std::move(s->token_s)});
  return out;
}

}  // namespace soartune::engine
