#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

#include "base/logging.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "model/op_profile.h"
#include "profile/profile.h"

namespace dsv4::model {
namespace {

size_t Sz(int64_t v) { return static_cast<size_t>(v); }

// Whether the compressed rows of every layer can live in pages of
// page_tokens source positions (whole rows per page).
Status CheckPageTokens(const std::vector<AttentionCacheGeometry>& geometries, int64_t num_layers,
                       int64_t page_tokens) {
  for (size_t l = 0; l < geometries.size(); ++l) {
    const int64_t ratio = geometries[l].compress_ratio;
    if (ratio == 0) continue;
    if (static_cast<int64_t>(l) == num_layers) {
      return InvalidArgument("the MTP block has compress ratio {}: no cache group pages its rows",
                             ratio);
    }
    if (page_tokens <= 0 || page_tokens % ratio != 0) {
      return InvalidArgument(
          "cache page of {} tokens is not a positive multiple of layer {}'s compress ratio {}",
          page_tokens, l, ratio);
    }
  }
  return Status::Ok();
}

}  // namespace

Model::~Model() = default;

Result<std::unique_ptr<Model>> Model::Load(const std::string& dir, const ModelOptions& options) {
  DSV4_ASSIGN_OR_RETURN(checkpoint::ModelConfig cfg, checkpoint::LoadModelConfig(dir));
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::Checkpoint> ckpt,
                        checkpoint::Checkpoint::Open(dir));
  return Load(std::move(ckpt), std::move(cfg), options);
}

Result<std::unique_ptr<Model>> Model::Load(std::unique_ptr<checkpoint::Checkpoint> ckpt,
                                           checkpoint::ModelConfig cfg,
                                           const ModelOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Model> m(new Model());
  m->cfg_ = std::move(cfg);
  m->ckpt_ = std::move(ckpt);
  DSV4_RETURN_IF_ERROR(m->AttachPrepacked(options));
  DSV4_RETURN_IF_ERROR(m->Bind(options));
  m->store_.PackDeferred(*m->ckpt_, options.load_threads);
  m->UnmapOtherRanksExperts(options);
  const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
  DSV4_LOG_INFO("Bound the weights in {:.3f} s (prepacked sidecar {})", dt.count(),
                checkpoint::PrepackedOutcomeName(m->prepacked_.outcome));
  return m;
}

Status Model::AttachPrepacked(const ModelOptions& options) {
  prepacked_ = PrepackedReport();
  if (options.prepacked == "off") return Status::Ok();
  const bool explicit_path = options.prepacked != "auto";
  const int64_t ranks = ExpertRanks(options);
  std::string path =
      explicit_path ? options.prepacked : ckpt_->dir() + "/" + checkpoint::PrepackedFileName(ranks);
  checkpoint::PrepackedOpenOptions open;
  open.ranks = ranks;
  open.min_residency = options.prepacked_min_residency;
  open.verify_threads = options.prepacked_verify_threads;
  if (explicit_path) {
    // Any stacking binds (expert e is flattened entry e of [R, E/R]), so a
    // named sidecar is checked against the rank count it records.
    if (const int64_t recorded = checkpoint::PrepackedFileRanks(path); recorded > 0) {
      open.ranks = recorded;
    }
  }
  DSV4_ASSIGN_OR_RETURN(checkpoint::PrepackedDecision d,
                        checkpoint::OpenPrepacked(path, *ckpt_, cfg_, open));
  if (!explicit_path && ranks > 1 && d.outcome == checkpoint::PrepackedOutcome::kMissing) {
    // No sidecar for this rank count: the one-process sidecar binds as well.
    DSV4_LOG_INFO("No prepacked sidecar at {}; trying the one-process {}", path,
                  checkpoint::PrepackedFileName(1));
    path = ckpt_->dir() + "/" + checkpoint::PrepackedFileName(1);
    open.ranks = 1;
    DSV4_ASSIGN_OR_RETURN(d, checkpoint::OpenPrepacked(path, *ckpt_, cfg_, open));
  }
  prepacked_ = {d.outcome, d.path, d.reason, d.residency};
  const char* fallback = "; repacking from the checkpoint";
  switch (d.outcome) {
    case checkpoint::PrepackedOutcome::kUsed:
      DSV4_LOG_INFO(
          "Using prepacked sidecar {} (sampled page-cache residency {:.1f}%, data checksum "
          "verified in {:.3f} s)",
          path, 100 * d.residency, d.verify_seconds);
      ckpt_->SetOverlay(std::move(d.file));
      break;
    case checkpoint::PrepackedOutcome::kMissing:
      if (explicit_path) return NotFound("prepacked sidecar {} does not exist", path);
      DSV4_LOG_INFO("No prepacked sidecar at {}{} (`dsv4 prepack` writes one)", path, fallback);
      break;
    case checkpoint::PrepackedOutcome::kCold:
      DSV4_LOG_WARN("Skipping cold prepacked sidecar {} ({}){}", path, d.reason, fallback);
      break;
    case checkpoint::PrepackedOutcome::kStale:
      DSV4_LOG_WARN("Ignoring stale prepacked sidecar {} ({}){}", path, d.reason, fallback);
      break;
    case checkpoint::PrepackedOutcome::kMismatch:
      DSV4_LOG_WARN("Ignoring prepacked sidecar {}: its tensors differ from layout v{} ({}){}",
                    path, checkpoint::kPrepackedLayoutVersion, d.reason, fallback);
      break;
    case checkpoint::PrepackedOutcome::kUnreadable:
    case checkpoint::PrepackedOutcome::kDisabled:
      DSV4_LOG_WARN("Ignoring unreadable prepacked sidecar {} ({}){}", path, d.reason, fallback);
      break;
  }
  return Status::Ok();
}

int64_t Model::MappedWeightBytes() const {
  const checkpoint::SafetensorsFile* overlay = ckpt_->overlay();
  int64_t bytes = 0;
  if (overlay == nullptr) {
    for (const auto& shard : ckpt_->shards()) bytes += static_cast<int64_t>(shard->mapped_bytes());
    return bytes;
  }
  bytes = static_cast<int64_t>(overlay->mapped_bytes());
  for (const char* name : {"embed.weight", "head.weight"}) {  // not in the sidecar
    for (const auto& shard : ckpt_->shards()) {
      if (const TensorView* t = shard->Find(name)) bytes += static_cast<int64_t>(t->nbytes());
    }
  }
  return bytes;
}

int64_t Model::ExpertRanks(const ModelOptions& options) {
  if (options.expert_parallel != nullptr && options.expert_parallel->size() > 1) {
    return options.expert_parallel->size();
  }
  return options.ranks;
}

void Model::UnmapOtherRanksExperts(const ModelOptions& options) {
  const int64_t e = cfg_.n_routed_experts;
  expert_first_ = 0;
  expert_last_ = e;
  const ExpertShard shard{options.expert_parallel, nullptr};
  if (!shard.active()) return;
  expert_first_ = shard.first(e);
  expert_last_ = shard.last(e);
  const int64_t before = MappedWeightBytes();
  const int64_t unmapped = ckpt_->UnmapRoutedExpertsOutside(expert_first_, expert_last_, e);
  DSV4_LOG_INFO(
      "rank {} of {}: bound routed experts [{}, {}) of {} ({:.1f} MiB); unmapped {:.1f} MiB of "
      "experts it never reads, {:.1f} of {:.1f} MiB of weights stay mapped",
      shard.comm->rank(), shard.comm->size(), expert_first_, expert_last_, e,
      static_cast<double>(RoutedExpertBytes()) / (1 << 20),
      static_cast<double>(unmapped) / (1 << 20),
      static_cast<double>(MappedWeightBytes()) / (1 << 20),
      static_cast<double>(before) / (1 << 20));
}

int64_t Model::RoutedExpertBytes() const {
  return ckpt_->RoutedExpertBytes(expert_first_, expert_last_, cfg_.n_routed_experts);
}

Status Model::Bind(const ModelOptions& options) {
  const checkpoint::ModelConfig& c = cfg_;
  const int64_t d = c.hidden_size;
  const int64_t v = c.vocab_size;
  if (d % 128 != 0 || c.moe_intermediate_size % 128 != 0) {
    return InvalidArgument("hidden_size {} and moe_intermediate_size {} must be multiples of 128",
                           d, c.moe_intermediate_size);
  }
  if (static_cast<int64_t>(c.compress_ratios.size()) < c.num_layers_with_mtp()) {
    return InvalidArgument("compress_ratios has {} entries, need {}", c.compress_ratios.size(),
                           c.num_layers_with_mtp());
  }
  hc_ = HcShape::FromConfig(c);
  ExpertShard shard{options.expert_parallel, expert_stats_.get()};
  shard.data_parallel = options.data_parallel && shard.active();
  if (shard.active() && c.n_routed_experts % shard.comm->size() != 0) {
    return InvalidArgument("--ep {} does not divide the model's {} routed experts",
                           shard.comm->size(), c.n_routed_experts);
  }
  DSV4_ASSIGN_OR_RETURN(embed_, BindBf16(*ckpt_, "embed.weight", {v, d}, store_));
  // In the BF16 pair layout where the GEMMs read it (the head is the
  // largest dense GEMV of a decode step).
  DSV4_ASSIGN_OR_RETURN(head_, Bf16Linear::Load(*ckpt_, "head", v, d));
  DSV4_ASSIGN_OR_RETURN(main_head_.hc_head, LoadHcWeights(*ckpt_, "hc_head", hc_, true, store_));
  DSV4_ASSIGN_OR_RETURN(main_head_.norm, BindBf16(*ckpt_, "norm.weight", {d}, store_));
  // Only this rank's routed experts are bound (the others' views stay empty:
  // the sharded MoE never reads them, and UnmapOtherRanksExperts unmaps them).
  const ExpertRange experts =
      shard.active() ? ExpertRange{shard.first(c.n_routed_experts), shard.last(c.n_routed_experts)}
                     : ExpertRange{0, c.n_routed_experts};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    DSV4_ASSIGN_OR_RETURN(std::unique_ptr<Block> b,
                          Block::Load(*ckpt_, c, l, fmt::format("layers.{}.", l), store_, experts));
    shard.layer = static_cast<int32_t>(l);
    b->set_expert_shard(shard);
    if (shard.data_parallel) moe_layers_.push_back(b->moe_layer());
    blocks_.push_back(std::move(b));
  }
  if (!options.load_mtp || c.num_nextn_predict_layers == 0) return Status::Ok();
  // Only the first MTP layer is bound (Flash has exactly one).
  const std::string p = "mtp.0.";
  DSV4_ASSIGN_OR_RETURN(mtp_block_,
                        Block::Load(*ckpt_, c, c.num_hidden_layers, p, store_, experts));
  shard.layer = static_cast<int32_t>(c.num_hidden_layers);
  mtp_block_->set_expert_shard(shard);
  if (shard.data_parallel) moe_layers_.push_back(mtp_block_->moe_layer());
  DSV4_ASSIGN_OR_RETURN(mtp_.e_proj, Linear::Load(*ckpt_, p + "e_proj", d, d, store_));
  DSV4_ASSIGN_OR_RETURN(mtp_.h_proj, Linear::Load(*ckpt_, p + "h_proj", d, d, store_));
  DSV4_ASSIGN_OR_RETURN(mtp_.enorm, BindBf16(*ckpt_, p + "enorm.weight", {d}, store_));
  DSV4_ASSIGN_OR_RETURN(mtp_.hnorm, BindBf16(*ckpt_, p + "hnorm.weight", {d}, store_));
  DSV4_ASSIGN_OR_RETURN(mtp_.head.norm, BindBf16(*ckpt_, p + "norm.weight", {d}, store_));
  DSV4_ASSIGN_OR_RETURN(mtp_.head.hc_head, LoadHcWeights(*ckpt_, p + "hc_head", hc_, true, store_));
  return Status::Ok();
}

// [num_layers (+ 1 MTP when included)] the geometry of each layer's cache.
std::vector<AttentionCacheGeometry> Model::CacheGeometries(const CacheOptions& options) const {
  std::vector<AttentionCacheGeometry> g;
  for (const auto& b : blocks_) {
    // Every layer kind keeps position-indexed rings (window KV and compressor
    // token states), so the same slack lets all of them re-run their last
    // (ring - window) positions: the rollback of rejected speculative tokens.
    g.push_back(b->attention().CacheGeometry(options.ring_capacity));
  }
  if (mtp_block_ != nullptr && options.include_mtp) {
    g.push_back(mtp_block_->attention().CacheGeometry(options.mtp_ring_capacity));
  }
  return g;
}

std::unique_ptr<ModelCache> Model::NewCache(int64_t num_slots, const CacheOptions& options) const {
  std::vector<AttentionCacheGeometry> geometries = CacheGeometries(options);
  std::vector<std::unique_ptr<AttentionCache>> layers;
  for (int64_t l = 0; l < num_layers(); ++l) {
    layers.push_back(std::make_unique<AttentionCache>(geometries[Sz(l)], num_slots));
  }
  std::unique_ptr<AttentionCache> mtp;
  if (static_cast<int64_t>(geometries.size()) > num_layers()) {
    mtp = std::make_unique<AttentionCache>(geometries.back(), num_slots);
  }
  return std::make_unique<ModelCache>(std::move(layers), std::move(mtp), num_slots);
}

Result<std::unique_ptr<ModelCache>> Model::NewCache(int64_t num_slots, const CacheOptions& options,
                                                    const CachePools& pools) const {
  std::vector<AttentionCacheGeometry> geometries = CacheGeometries(options);
  for (int64_t pages : pools.num_pages) {
    if (pages < 0 || pages > std::numeric_limits<int32_t>::max()) {
      return InvalidArgument("a cache pool of {} pages does not fit 32-bit page ids", pages);
    }
  }
  DSV4_RETURN_IF_ERROR(CheckPageTokens(geometries, num_layers(), pools.page_tokens));
  std::vector<std::unique_ptr<AttentionCache>> layers;
  std::unique_ptr<AttentionCache> mtp;
  for (size_t l = 0; l < geometries.size(); ++l) {
    AttentionCacheGeometry& g = geometries[l];
    g.page_tokens = pools.page_tokens;
    g.compressed_pages =
        pools.num_pages[g.compress_ratio == 4 ? cache::kGroupCmpC4 : cache::kGroupCmpC128];
    g.index_pages = pools.num_pages[cache::kGroupIdx];
    std::unique_ptr<AttentionCache> c;
    try {
      c = std::make_unique<AttentionCache>(g, num_slots);
    } catch (const std::bad_alloc&) {
      return ResourceExhausted("cannot reserve the cache pools of layer {} ({} slots)", l,
                               num_slots);
    }
    if (static_cast<int64_t>(l) < num_layers()) {
      layers.push_back(std::move(c));
    } else {
      mtp = std::move(c);
    }
  }
  return std::make_unique<ModelCache>(std::move(layers), std::move(mtp), num_slots);
}

Result<CacheDeclaration> Model::DeclareCache(const CacheOptions& options,
                                             int64_t page_tokens) const {
  std::vector<AttentionCacheGeometry> geometries = CacheGeometries(options);
  if (page_tokens <= 0 || page_tokens > std::numeric_limits<int32_t>::max()) {
    return InvalidArgument("--block-size {} is out of range", page_tokens);
  }
  cache::Dsv4CacheGeometry shape;
  shape.block_size = static_cast<int32_t>(page_tokens);
  shape.window = static_cast<int32_t>(cfg_.sliding_window);
  shape.csa_ratio = 4;
  for (const AttentionCacheGeometry& g : geometries) {
    if (g.compress_ratio > 4) shape.hca_ratio = static_cast<int32_t>(g.compress_ratio);
  }
  // The MTP block's window shares the ori pages, one row behind.
  shape.mtp_in_ori = static_cast<int64_t>(geometries.size()) > num_layers();
  CacheDeclaration d;
  DSV4_ASSIGN_OR_RETURN(d.groups, cache::MakeDsv4CacheGroups(shape));  // names --block-size
  DSV4_RETURN_IF_ERROR(CheckPageTokens(geometries, num_layers(), page_tokens));
  for (AttentionCacheGeometry& g : geometries) g.page_tokens = page_tokens;
  for (cache::Dsv4Group group : kPooledGroups) {
    int64_t bytes = 0;
    for (const AttentionCacheGeometry& g : geometries) {
      bytes += static_cast<int64_t>(AttentionCache::PoolPageBytes(g, group));
    }
    d.groups[Sz(group)].page_bytes = bytes;
  }
  d.slot_bytes = static_cast<int64_t>(CacheFixedBytesPerSlot(options));
  d.page_tokens = page_tokens;
  return d;
}

size_t Model::CacheFixedBytesPerSlot(const CacheOptions& options) const {
  size_t n = 0;
  for (const AttentionCacheGeometry& g : CacheGeometries(options)) {
    n += AttentionCache::FixedBytesFor(g);
  }
  return n;
}

Status Model::ValidateBatch(const ForwardBatch& batch, const ModelCache& cache, int64_t first_layer,
                            int64_t end_layer) const {
  const int64_t n = batch.num_tokens();
  if (static_cast<int64_t>(batch.positions.size()) != n) {
    return InvalidArgument("batch has {} token ids but {} positions", n, batch.positions.size());
  }
  int64_t next_row = 0;
  for (size_t si = 0; si < batch.seqs.size(); ++si) {
    const SequenceSlice& s = batch.seqs[si];
    if (s.num_tokens < 1 || s.row_offset != next_row || s.start_pos < 0) {
      return InvalidArgument("batch slice (slot {}, start {}, rows {} at {}) is malformed",
                             s.cache_slot, s.start_pos, s.num_tokens, s.row_offset);
    }
    // Quadratic in the number of sequences but allocation-free (hot path).
    bool repeated = false;
    for (size_t sj = 0; sj < si; ++sj) repeated |= batch.seqs[sj].cache_slot == s.cache_slot;
    if (s.cache_slot < 0 || s.cache_slot >= cache.num_slots() || repeated) {
      return InvalidArgument("batch cache slot {} is out of range [0, {}) or repeated",
                             s.cache_slot, cache.num_slots());
    }
    for (int64_t i = 0; i < s.num_tokens; ++i) {
      if (batch.positions[Sz(s.row_offset + i)] != s.start_pos + i) {
        return InvalidArgument("batch row {} has position {}, expected {}", s.row_offset + i,
                               batch.positions[Sz(s.row_offset + i)], s.start_pos + i);
      }
    }
    next_row += s.num_tokens;
    for (int64_t l = first_layer; l < end_layer; ++l) {
      const AttentionCache& c = cache.layer(l);
      const int64_t cached = c.NumCachedTokens(s.cache_slot);
      if (!c.CanContinueAt(s.cache_slot, s.start_pos)) {
        return FailedPrecondition(
            "slot {} of layer {} holds {} tokens and cannot continue at position {}", s.cache_slot,
            l, cached, s.start_pos);
      }
      const Status pages = c.CheckPages(s);
      if (!pages.ok()) {
        return Status(pages.code(), fmt::format("layer {}: {}", l, pages.message()));
      }
    }
  }
  if (next_row != n) {
    return InvalidArgument("batch slices cover {} rows of {}", next_row, n);
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = batch.token_ids[Sz(i)];
    if (id < 0 || id >= cfg_.vocab_size) {
      return InvalidArgument("token id {} at row {} is outside the vocabulary [0, {})", id, i,
                             cfg_.vocab_size);
    }
  }
  for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
    const int64_t r = batch.logit_rows[i];
    if (r < 0 || r >= n || (i > 0 && r <= batch.logit_rows[i - 1])) {
      return InvalidArgument("logit row {} is out of range [0, {}) or not ascending", r, n);
    }
  }
  return Status::Ok();
}

Status Model::PrepareBatch(const ForwardBatch& batch, ModelCache& cache, int64_t first_layer,
                           int64_t end_layer) const {
  DSV4_RETURN_IF_ERROR(ValidateBatch(batch, cache, first_layer, end_layer));
  for (int64_t l = first_layer; l < end_layer; ++l) {
    for (const SequenceSlice& s : batch.seqs) cache.layer(l).ApplyPages(s);
  }
  return Status::Ok();
}

void Model::EmbedStreams(const int32_t* ids, int64_t n, bf16* streams) const {
  const int64_t d = cfg_.hidden_size;
  for (int64_t t = 0; t < n; ++t) {
    const bf16* row = embed_ + static_cast<int64_t>(ids[t]) * d;
    for (int64_t j = 0; j < hc_.hc; ++j) {
      std::memcpy(streams + (t * hc_.hc + j) * d, row, Sz(d) * sizeof(bf16));
    }
  }
}

void Model::Head(const HeadWeights& hw, const bf16* streams, const ForwardBatch& batch,
                 const ForwardOutputs& out, Workspace& ws, ThreadPool* pool) const {
  const auto r = static_cast<int64_t>(batch.logit_rows.size());
  if (r == 0 || (out.logits == nullptr && out.hidden == nullptr)) return;
  const int64_t d = cfg_.hidden_size;
  const int64_t width = stream_width();
  bf16* g = ws.Get<bf16>(WsSlot::kMdlHeadRows, Sz(r * width));  // [r, hc, D] gathered rows
  bf16* y = ws.Get<bf16>(WsSlot::kMdlHeadOut, Sz(r * d));       // [r, D]
  for (int64_t i = 0; i < r; ++i) {
    std::memcpy(g + i * width, streams + batch.logit_rows[Sz(i)] * width, Sz(width) * sizeof(bf16));
  }
  profile::Span span(profile::kKernel, "kernel", "head");
  if (span) {
    const int64_t v = cfg_.vocab_size;
    span.Arg("rows", r)
        .Arg("bytes", v * d * 2 + hw.hc_head.num_mix * width * 4)
        .Arg("flops", 2 * r * v * d + 2 * r * hw.hc_head.num_mix * width);
  }
  HcHead(hc_, hw.hc_head, g, r, y, ws, pool);
  kernels::RmsNorm(y, r, d, hw.norm, static_cast<float>(cfg_.rms_norm_eps), y);
  if (out.hidden != nullptr) std::memcpy(out.hidden, y, Sz(r * d) * sizeof(bf16));
  if (out.logits != nullptr) {
    if (out.approx_logits) {
      kernels::GemmBf16F32Approx(y, r, d, head_.data(), cfg_.vocab_size, out.logits, pool,
                                 head_.layout());
    } else {
      kernels::GemmBf16F32(y, r, d, head_.data(), cfg_.vocab_size, out.logits, pool,
                           head_.layout());
    }
  }
}

void Model::FinishDataParallelStep(Workspace& ws, ThreadPool* pool) const {
  model::FinishDataParallelStep(moe_layers_, ws, pool);
}

Status Model::Forward(const ForwardBatch& batch, ModelCache& cache, const ForwardOutputs& out,
                      Workspace& ws, ThreadPool* pool, ModelTrace* trace) const {
  if (out.approx_logits) {
    return InvalidArgument("approximate logits are for MTP drafts only, not the main model");
  }
  DSV4_RETURN_IF_ERROR(PrepareBatch(batch, cache, 0, num_layers()));
  const int64_t n = batch.num_tokens();
  if (n == 0) return Status::Ok();
  // The container of this forward's kernel spans (bench's per-op table
  // divides by it); decode rows are the slices of one row (+ drafts).
  profile::Span fwd(profile::kKernel, "kernel", "model.forward");
  if (fwd) {
    fwd.Arg("rows", n).Arg("sequences", static_cast<int64_t>(batch.seqs.size()));
  }
  const size_t elems = Sz(n * stream_width());
  bf16* cur = ws.Get<bf16>(WsSlot::kMdlStreams0, elems);   // [n, hc, D]
  bf16* next = ws.Get<bf16>(WsSlot::kMdlStreams1, elems);  // [n, hc, D]
  {
    profile::Span s(profile::kKernel, "kernel", "embed");
    if (s) s.Arg("bytes", n * stream_width() * 2 + n * cfg_.hidden_size * 2);
    EmbedStreams(batch.token_ids.data(), n, cur);
  }
  if (trace != nullptr) {
    trace->blocks.resize(Sz(num_layers()));
    trace->layer_streams.resize(trace->capture_streams ? Sz(num_layers()) : 0);
  }
  for (int64_t l = 0; l < num_layers(); ++l) {
    BlockTrace* bt = trace != nullptr ? &trace->blocks[Sz(l)] : nullptr;
    blocks_[Sz(l)]->Forward(cur, batch, cache.layer(l), next, ws, pool, bt, out.expert_usage);
    std::swap(cur, next);
    if (trace != nullptr && trace->capture_streams) {
      trace->layer_streams[Sz(l)].assign(cur, cur + elems);
    }
  }
  if (out.streams != nullptr) std::memcpy(out.streams, cur, elems * sizeof(bf16));
  Head(main_head_, cur, batch, out, ws, pool);
  return Status::Ok();
}

Status Model::ForwardMtp(const ForwardBatch& batch, const bf16* h, ModelCache& cache,
                         const ForwardOutputs& out, Workspace& ws, ThreadPool* pool,
                         BlockTrace* trace) const {
  if (mtp_block_ == nullptr || !cache.has_mtp()) {
    return FailedPrecondition("the model or its cache was built without the MTP layer");
  }
  DSV4_RETURN_IF_ERROR(PrepareBatch(batch, cache, num_layers(), num_layers() + 1));
  const int64_t n = batch.num_tokens();
  if (n == 0) return Status::Ok();
  if (h == nullptr) return InvalidArgument("ForwardMtp needs the main model's streams");
  profile::Span fwd(profile::kKernel, "kernel", "model.forward_mtp");
  if (fwd) fwd.Arg("rows", n);
  profile::Span proj(profile::kKernel, "kernel", "mtp.proj");
  if (proj) {
    const int64_t dd = cfg_.hidden_size;
    proj.Arg("bytes", 2 * dd * dd)
        .Arg("flops", op_cost::GemmFlops(n, dd, dd) * (1 + hc_.hc));  // e_proj, h_proj per stream
  }
  const int64_t d = cfg_.hidden_size;
  const int64_t hc = hc_.hc;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  bf16* e = ws.Get<bf16>(WsSlot::kMtpE, Sz(n * d));         // [n, D]
  bf16* ep = ws.Get<bf16>(WsSlot::kMtpEp, Sz(n * d));       // [n, D]
  bf16* hn = ws.Get<bf16>(WsSlot::kMtpHn, Sz(n * hc * d));  // [n, hc, D]
  bf16* hp = ws.Get<bf16>(WsSlot::kMtpHp, Sz(n * hc * d));  // [n, hc, D]
  for (int64_t t = 0; t < n; ++t) {
    std::memcpy(e + t * d, embed_ + static_cast<int64_t>(batch.token_ids[Sz(t)]) * d,
                Sz(d) * sizeof(bf16));
  }
  kernels::RmsNorm(e, n, d, mtp_.enorm, eps, e);
  kernels::RmsNorm(h, n * hc, d, mtp_.hnorm, eps, hn);  // each stream separately
  mtp_.e_proj.Forward(e, n, ep, ws, pool);
  mtp_.h_proj.Forward(hn, n * hc, hp, ws, pool);  // per token and stream
  const size_t elems = Sz(n * stream_width());
  bf16* x = ws.Get<bf16>(WsSlot::kMdlStreams0, elems);  // [n, hc, D]
  bf16* y = ws.Get<bf16>(WsSlot::kMdlStreams1, elems);  // [n, hc, D]
  // One BF16 rounding of the sum; e_proj is broadcast to every stream.
  ParallelFor(pool, n, 8, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t j = 0; j < hc; ++j) {
        const bf16* a = ep + t * d;
        const bf16* b = hp + (t * hc + j) * d;
        bf16* o = x + (t * hc + j) * d;
        for (int64_t c = 0; c < d; ++c) o[c] = F32ToBf16(Bf16ToF32(a[c]) + Bf16ToF32(b[c]));
      }
    }
  });
  proj.End();
  mtp_block_->Forward(x, batch, cache.layer(num_layers()), y, ws, pool, trace, out.expert_usage);
  if (out.streams != nullptr) std::memcpy(out.streams, y, elems * sizeof(bf16));
  Head(mtp_.head, y, batch, out, ws, pool);
  return Status::Ok();
}

Status Model::RunBlock(int64_t layer_id, const bf16* in, const ForwardBatch& batch,
                       ModelCache& cache, bf16* out, Workspace& ws, ThreadPool* pool,
                       BlockTrace* trace) const {
  if (layer_id < 0 || layer_id > num_layers() || (layer_id == num_layers() && !has_mtp())) {
    return InvalidArgument("no block {} (main layers 0..{}, MTP {})", layer_id, num_layers() - 1,
                           has_mtp() ? "loaded" : "not loaded");
  }
  if (layer_id == num_layers() && !cache.has_mtp()) {
    return FailedPrecondition("the cache was built without the MTP layer");
  }
  if (in == out) return InvalidArgument("RunBlock input and output streams must not alias");
  DSV4_RETURN_IF_ERROR(PrepareBatch(batch, cache, layer_id, layer_id + 1));
  const Block& b = layer_id == num_layers() ? *mtp_block_ : *blocks_[Sz(layer_id)];
  b.Forward(in, batch, cache.layer(layer_id), out, ws, pool, trace);
  return Status::Ok();
}

}  // namespace dsv4::model
