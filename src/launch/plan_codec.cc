#include "launch/plan_codec.h"

#include <cstring>
#include <string>
#include <type_traits>

namespace dsv4::launch {
namespace {

class Writer {
 public:
  template <typename T>
  void Pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  template <typename T>
  void Vec(const std::vector<T>& v) {
    Pod(static_cast<uint64_t>(v.size()));
    for (const T& x : v) Pod(x);
  }
  void Str(const std::string& s) {
    Pod(static_cast<uint64_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& in) : in_(in) {}
  template <typename T>
  Status Pod(T* v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (in_.size() - at_ < sizeof(T)) return InvalidArgument("encoded message is truncated");
    std::memcpy(v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return Status::Ok();
  }
  Status Count(uint64_t elem_bytes, size_t* n) {
    uint64_t c = 0;
    DSV4_RETURN_IF_ERROR(Pod(&c));
    if (elem_bytes > 0 && c > (in_.size() - at_) / elem_bytes) {
      return InvalidArgument("encoded message: a count of {} exceeds the bytes left", c);
    }
    *n = static_cast<size_t>(c);
    return Status::Ok();
  }
  template <typename T>
  Status Vec(std::vector<T>* v) {
    size_t n = 0;
    DSV4_RETURN_IF_ERROR(Count(sizeof(T), &n));
    v->resize(n);
    for (T& x : *v) DSV4_RETURN_IF_ERROR(Pod(&x));
    return Status::Ok();
  }
  Status Str(std::string* s) {
    size_t n = 0;
    DSV4_RETURN_IF_ERROR(Count(1, &n));
    s->assign(reinterpret_cast<const char*>(in_.data() + at_), n);
    at_ += n;
    return Status::Ok();
  }
  Status End() const {
    if (at_ != in_.size())
      return InvalidArgument("encoded message has {} trailing bytes", in_.size() - at_);
    return Status::Ok();
  }

 private:
  const std::vector<uint8_t>& in_;
  size_t at_ = 0;
};

void PutSampling(Writer& w, const engine::SamplingParams& p) {
  w.Pod(p.temperature);
  w.Pod(p.top_p);
  w.Pod(p.top_k);
  w.Pod(p.min_p);
  w.Pod(p.seed.has_value());
  w.Pod(p.seed.value_or(0));
  w.Pod(p.presence_penalty);
  w.Pod(p.frequency_penalty);
  w.Pod(p.repetition_penalty);
  w.Pod(p.logprobs);
  w.Pod(static_cast<uint64_t>(p.logit_bias.size()));
  for (const auto& [id, bias] : p.logit_bias) {
    w.Pod(id);
    w.Pod(bias);
  }
  w.Pod(p.ignore_eos);
  w.Pod(p.min_tokens);
  w.Vec(p.min_tokens_stop_ids);
}

Status GetSampling(Reader& r, engine::SamplingParams* p) {
  bool has_seed = false;
  uint64_t seed = 0;
  DSV4_RETURN_IF_ERROR(r.Pod(&p->temperature));
  DSV4_RETURN_IF_ERROR(r.Pod(&p->top_p));
  DSV4_RETURN_IF_ERROR(r.Pod(&p->top_k));
  DSV4_RETURN_IF_ERROR(r.Pod(&p->min_p));
  DSV4_RETURN_IF_ERROR(r.Pod(&has_seed));
  DSV4_RETURN_IF_ERROR(r.Pod(&seed));
  if (has_seed) p->seed = seed;
  DSV4_RETURN_IF_ERROR(r.Pod(&p->presence_penalty));
  DSV4_RETURN_IF_ERROR(r.Pod(&p->frequency_penalty));
  DSV4_RETURN_IF_ERROR(r.Pod(&p->repetition_penalty));
  DSV4_RETURN_IF_ERROR(r.Pod(&p->logprobs));
  size_t n = 0;
  DSV4_RETURN_IF_ERROR(r.Count(8, &n));
  p->logit_bias.resize(n);
  for (auto& [id, bias] : p->logit_bias) {
    DSV4_RETURN_IF_ERROR(r.Pod(&id));
    DSV4_RETURN_IF_ERROR(r.Pod(&bias));
  }
  DSV4_RETURN_IF_ERROR(r.Pod(&p->ignore_eos));
  DSV4_RETURN_IF_ERROR(r.Pod(&p->min_tokens));
  return r.Vec(&p->min_tokens_stop_ids);
}

void PutRequest(Writer& w, const engine::ScheduledRequest& q) {
  w.Pod(q.id);
  w.Pod(q.partition);
  w.Pod(q.slot);
  w.Pod(q.generation);
  w.Pod(q.is_new);
  PutSampling(w, q.sampling);
  w.Pod(q.num_prompt_tokens);
  w.Pod(q.start_pos);
  w.Vec(q.token_ids);
  w.Pod(q.num_draft);
  w.Pod(q.num_padded_tokens);
  w.Pod(q.needs_logits);
  w.Pod(static_cast<uint64_t>(q.block_tables.size()));
  for (const cache::BlockTable& t : q.block_tables) {
    w.Pod(t.first_page);
    w.Vec(t.pages);
  }
  w.Pod(static_cast<uint64_t>(q.fresh_pages.size()));
  for (const std::vector<int32_t>& f : q.fresh_pages) w.Vec(f);
  w.Pod(q.decode);
  w.Pod(q.restore_snapshot);
  w.Vec(q.prefix_token_ids);
  w.Pod(q.save_snapshot);
  w.Pod(q.save_at);
}

Status GetRequest(Reader& r, engine::ScheduledRequest* q) {
  DSV4_RETURN_IF_ERROR(r.Pod(&q->id));
  DSV4_RETURN_IF_ERROR(r.Pod(&q->partition));
  DSV4_RETURN_IF_ERROR(r.Pod(&q->slot));
  DSV4_RETURN_IF_ERROR(r.Pod(&q->generation));
  DSV4_RETURN_IF_ERROR(r.Pod(&q->is_new));
  DSV4_RETURN_IF_ERROR(GetSampling(r, &q->sampling));
  DSV4_RETURN_IF_ERROR(r.Pod(&q->num_prompt_tokens));
  DSV4_RETURN_IF_ERROR(r.Pod(&q->start_pos));
  DSV4_RETURN_IF_ERROR(r.Vec(&q->token_ids));
  DSV4_RETURN_IF_ERROR(r.Pod(&q->num_draft));
  DSV4_RETURN_IF_ERROR(r.Pod(&q->num_padded_tokens));
  DSV4_RETURN_IF_ERROR(r.Pod(&q->needs_logits));
  size_t n = 0;
  DSV4_RETURN_IF_ERROR(r.Count(16, &n));
  q->block_tables.resize(n);
  for (cache::BlockTable& t : q->block_tables) {
    DSV4_RETURN_IF_ERROR(r.Pod(&t.first_page));
    DSV4_RETURN_IF_ERROR(r.Vec(&t.pages));
  }
  DSV4_RETURN_IF_ERROR(r.Count(8, &n));
  q->fresh_pages.resize(n);
  for (std::vector<int32_t>& f : q->fresh_pages) DSV4_RETURN_IF_ERROR(r.Vec(&f));
  DSV4_RETURN_IF_ERROR(r.Pod(&q->decode));
  DSV4_RETURN_IF_ERROR(r.Pod(&q->restore_snapshot));
  DSV4_RETURN_IF_ERROR(r.Vec(&q->prefix_token_ids));
  DSV4_RETURN_IF_ERROR(r.Pod(&q->save_snapshot));
  return r.Pod(&q->save_at);
}

}  // namespace

std::vector<uint8_t> EncodePlan(const engine::StepPlan& plan) {
  Writer w;
  w.Pod(plan.step_id);
  w.Pod(plan.num_tokens);
  w.Pod(static_cast<uint64_t>(plan.requests.size()));
  for (const engine::ScheduledRequest& q : plan.requests) PutRequest(w, q);
  w.Vec(plan.released);
  w.Vec(plan.events);
  return w.Take();
}

Result<engine::StepPlan> DecodePlan(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  engine::StepPlan plan;
  DSV4_RETURN_IF_ERROR(r.Pod(&plan.step_id));
  DSV4_RETURN_IF_ERROR(r.Pod(&plan.num_tokens));
  size_t n = 0;
  DSV4_RETURN_IF_ERROR(r.Count(8, &n));
  plan.requests.resize(n);
  for (engine::ScheduledRequest& q : plan.requests) DSV4_RETURN_IF_ERROR(GetRequest(r, &q));
  DSV4_RETURN_IF_ERROR(r.Vec(&plan.released));
  DSV4_RETURN_IF_ERROR(r.Vec(&plan.events));
  DSV4_RETURN_IF_ERROR(r.End());
  return plan;
}

namespace {

void PutStatus(Writer& w, const Status& s) {
  w.Pod(static_cast<int32_t>(s.code()));
  w.Str(s.ok() ? std::string() : s.message());
}

Status GetStatus(Reader& r, Status* s) {
  int32_t code = 0;
  std::string message;
  DSV4_RETURN_IF_ERROR(r.Pod(&code));
  DSV4_RETURN_IF_ERROR(r.Str(&message));
  *s = code == 0 ? Status::Ok() : Status(static_cast<StatusCode>(code), std::move(message));
  return Status::Ok();
}

void PutLogprob(Writer& w, const engine::TokenLogprob& l) {
  w.Pod(l.token);
  w.Pod(l.logprob);
  w.Pod(static_cast<uint64_t>(l.top.size()));
  for (const auto& [token, logprob] : l.top) {
    w.Pod(token);
    w.Pod(logprob);
  }
}

Status GetLogprob(Reader& r, engine::TokenLogprob* l) {
  DSV4_RETURN_IF_ERROR(r.Pod(&l->token));
  DSV4_RETURN_IF_ERROR(r.Pod(&l->logprob));
  size_t n = 0;
  DSV4_RETURN_IF_ERROR(r.Count(8, &n));
  l->top.resize(n);
  for (auto& [token, logprob] : l->top) {
    DSV4_RETURN_IF_ERROR(r.Pod(&token));
    DSV4_RETURN_IF_ERROR(r.Pod(&logprob));
  }
  return Status::Ok();
}

}  // namespace

std::vector<uint8_t> EncodeStepResult(const Result<engine::StepResult>& result) {
  Writer w;
  PutStatus(w, result.status());
  if (!result.ok()) return w.Take();
  w.Pod(result->step_id);
  w.Pod(static_cast<uint64_t>(result->requests.size()));
  for (const engine::RequestResult& q : result->requests) {
    w.Pod(q.id);
    w.Pod(q.generation);
    w.Vec(q.tokens);
    w.Pod(q.num_accepted_drafts);
    w.Vec(q.drafts);
    w.Pod(static_cast<uint64_t>(q.logprobs.size()));
    for (const engine::TokenLogprob& l : q.logprobs) PutLogprob(w, l);
    PutStatus(w, q.error);
  }
  return w.Take();
}

Result<engine::StepResult> DecodeStepResult(const std::vector<uint8_t>& bytes, bool* malformed) {
  *malformed = true;
  Reader r(bytes);
  Status run;
  DSV4_RETURN_IF_ERROR(GetStatus(r, &run));
  engine::StepResult result;
  if (run.ok()) {
    DSV4_RETURN_IF_ERROR(r.Pod(&result.step_id));
    size_t n = 0;
    DSV4_RETURN_IF_ERROR(r.Count(8, &n));
    result.requests.resize(n);
    for (engine::RequestResult& q : result.requests) {
      DSV4_RETURN_IF_ERROR(r.Pod(&q.id));
      DSV4_RETURN_IF_ERROR(r.Pod(&q.generation));
      DSV4_RETURN_IF_ERROR(r.Vec(&q.tokens));
      DSV4_RETURN_IF_ERROR(r.Pod(&q.num_accepted_drafts));
      DSV4_RETURN_IF_ERROR(r.Vec(&q.drafts));
      size_t m = 0;
      DSV4_RETURN_IF_ERROR(r.Count(8, &m));
      q.logprobs.resize(m);
      for (engine::TokenLogprob& l : q.logprobs) DSV4_RETURN_IF_ERROR(GetLogprob(r, &l));
      DSV4_RETURN_IF_ERROR(GetStatus(r, &q.error));
    }
  }
  DSV4_RETURN_IF_ERROR(r.End());
  *malformed = false;
  if (!run.ok()) return run;
  return result;
}

std::vector<uint8_t> EncodeEngineOptions(const EngineOptions& o) {
  Writer w;
  w.Str(o.model_dir);
  w.Pod(o.threads);
  w.Str(o.cpu_list);
  w.Str(o.numa);
  w.Pod(o.max_model_len);
  w.Pod(o.max_num_seqs);
  w.Pod(o.max_num_batched_tokens);
  w.Pod(o.long_prefill_token_threshold);
  w.Pod(o.block_size);
  w.Pod(o.dp);
  w.Pod(o.ep);
  w.Pod(o.dist_timeout_s);
  w.Pod(o.num_speculative_tokens);
  w.Str(o.prepacked);
  w.Pod(o.enable_prefix_caching);
  // Every rank plans its own host's memory with the user's cache budget.
  w.Pod(o.kv_cache_memory);
  w.Pod(o.memory_utilization);
  return w.Take();
}

Result<EngineOptions> DecodeEngineOptions(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  EngineOptions o;
  DSV4_RETURN_IF_ERROR(r.Str(&o.model_dir));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.threads));
  DSV4_RETURN_IF_ERROR(r.Str(&o.cpu_list));
  DSV4_RETURN_IF_ERROR(r.Str(&o.numa));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.max_model_len));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.max_num_seqs));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.max_num_batched_tokens));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.long_prefill_token_threshold));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.block_size));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.dp));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.ep));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.dist_timeout_s));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.num_speculative_tokens));
  DSV4_RETURN_IF_ERROR(r.Str(&o.prepacked));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.enable_prefix_caching));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.kv_cache_memory));
  DSV4_RETURN_IF_ERROR(r.Pod(&o.memory_utilization));
  DSV4_RETURN_IF_ERROR(r.End());
  return o;
}

}  // namespace dsv4::launch
