#include "checkpoint/model_config.h"

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/file_util.h"
#include "base/mapped_file.h"

namespace dsv4::checkpoint {

namespace {

using nlohmann::json;

// Upper bounds of the fields that size memory or loops (docs/checkpoint.md,
// "Field ranges").  Each is 8x or more the largest published DeepSeek-V4
// value (Flash / Pro), so any real config passes, while a typo or a damaged
// file (index_topk 1e9, hc_sinkhorn_iters 1e9) is refused before anything is
// allocated or run.  Fields whose size the tensors also carry are checked
// against the checkpoint too; these bounds matter most for the free ones
// (index_topk, hc_sinkhorn_iters, sliding_window, max_position_embeddings).
constexpr int64_t kMaxVocab = int64_t{1} << 24;      // ids are int32; Flash 129,280
constexpr int64_t kMaxWidth = 65536;                 // hidden 4096/7168, ranks 1024-1536
constexpr int64_t kMaxLayers = 1024;                 // Flash 43, Pro 61
constexpr int64_t kMaxHeads = 1024;                  // 64 / 128
constexpr int64_t kMaxHeadDim = 4096;                // 512 (indexer 128)
constexpr int64_t kMaxWindow = 65536;                // 128
constexpr int64_t kMaxPositions = int64_t{1} << 28;  // 1,048,576
constexpr int64_t kMaxIndexTopk = 16384;             // 512 / 1024
constexpr int64_t kMaxExperts = 4096;                // 256 / 384
constexpr int64_t kMaxSharedExperts = 64;            // 1
constexpr int64_t kMaxHcMult = 16;                   // 4
constexpr int64_t kMaxSinkhornIters = 1000;          // 20
constexpr int64_t kMaxMtpLayers = 16;                // 1
constexpr double kMaxRopeTheta = 1e12;               // 10,000 / 160,000
constexpr double kMaxRopeParam = 1e4;                // YaRN factor 16, beta 32 / 1
constexpr double kMaxScale = 1000;                   // routed_scaling_factor 1.5 / 2.5
constexpr double kMaxSwigluLimit = 1e6;              // 10
constexpr double kMaxEps = 1;                        // 1e-6

// Typed access to the fields of one JSON object.  Every error names the file
// and the (dotted) field so a user can fix the config without reading code.
class FieldReader {
 public:
  FieldReader(const json& obj, const std::string& file, std::string prefix)
      : obj_(obj), file_(file), prefix_(std::move(prefix)) {}

  Status Error(const std::string& key, const std::string& what) const {
    return InvalidArgument("{}: field '{}{}' {}", file_, prefix_, key, what);
  }

  // Returns nullptr if absent (or JSON null, which HF writes for "unset").
  const json* Get(const std::string& key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  // An integer in [min, max]: below min (or not an integer) gets the type
  // message, above max says the value and the bound.
  Status Int(const std::string& key, bool required, int64_t min, int64_t max, int64_t* out) const {
    const json* v = Get(key);
    if (v == nullptr) return required ? Error(key, "is missing") : Status::Ok();
    const char* what = min > 0
                           ? "must be a positive integer"
                           : (min == 0 ? "must be a non-negative integer" : "must be an integer");
    if (!v->is_number_integer()) return Error(key, what);
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Error(key, what);
    }
    const int64_t x = v->get<int64_t>();
    if (x < min) return Error(key, what);
    if (x > max) return Error(key, fmt::format("is {}, above the {} this engine accepts", x, max));
    *out = x;
    return Status::Ok();
  }

  // `positive`: must be > 0; otherwise >= 0.  At most `max`.
  Status Real(const std::string& key, bool required, bool positive, double max, double* out) const {
    const json* v = Get(key);
    if (v == nullptr) return required ? Error(key, "is missing") : Status::Ok();
    const char* what = positive ? "must be a positive number" : "must be a non-negative number";
    if (!v->is_number()) return Error(key, what);
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < 0 || (positive && x == 0)) return Error(key, what);
    if (x > max) {
      return Error(key, fmt::format("is {:g}, above the {:g} this engine accepts", x, max));
    }
    *out = x;
    return Status::Ok();
  }

  Status Str(const std::string& key, bool required, std::string* out) const {
    const json* v = Get(key);
    if (v == nullptr) return required ? Error(key, "is missing") : Status::Ok();
    if (!v->is_string()) return Error(key, "must be a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }

  Status Bool(const std::string& key, bool required, bool* out) const {
    const json* v = Get(key);
    if (v == nullptr) return required ? Error(key, "is missing") : Status::Ok();
    if (!v->is_boolean()) return Error(key, "must be true or false");
    *out = v->get<bool>();
    return Status::Ok();
  }

  Status IntList(const std::string& key, bool required, std::vector<int64_t>* out) const {
    const json* v = Get(key);
    if (v == nullptr) return required ? Error(key, "is missing") : Status::Ok();
    if (!v->is_array()) return Error(key, "must be a list of non-negative integers");
    out->clear();
    for (const json& e : *v) {
      if (!e.is_number_unsigned() || e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        return Error(key, "must be a list of non-negative integers");
      }
      out->push_back(e.get<int64_t>());
    }
    return Status::Ok();
  }

  Status StrList(const std::string& key, bool required, std::vector<std::string>* out) const {
    const json* v = Get(key);
    if (v == nullptr) return required ? Error(key, "is missing") : Status::Ok();
    if (!v->is_array()) return Error(key, "must be a list of strings");
    out->clear();
    for (const json& e : *v) {
      if (!e.is_string()) return Error(key, "must be a list of strings");
      out->push_back(e.get<std::string>());
    }
    return Status::Ok();
  }

  // The sub-object `key` (nullptr if absent); an error if it is not an object.
  Result<const json*> Object(const std::string& key, bool required) const {
    const json* v = Get(key);
    if (v == nullptr) {
      if (required) return Error(key, "is missing");
      return static_cast<const json*>(nullptr);
    }
    if (!v->is_object()) return Error(key, "must be an object");
    return v;
  }

  const std::string& file() const { return file_; }
  const std::string& prefix() const { return prefix_; }

 private:
  const json& obj_;
  const std::string& file_;
  std::string prefix_;
};

Status ParseRopeScaling(const FieldReader& top, RopeScaling* rs) {
  DSV4_ASSIGN_OR_RETURN(const json* obj, top.Object("rope_scaling", /*required=*/false));
  if (obj == nullptr) return Status::Ok();  // plain RoPE everywhere
  FieldReader r(*obj, top.file(), "rope_scaling.");
  // Newer transformers write "rope_type"; DeepSeek's config writes "type".
  DSV4_RETURN_IF_ERROR(r.Str("rope_type", false, &rs->type));
  DSV4_RETURN_IF_ERROR(r.Str("type", rs->type.empty(), &rs->type));
  DSV4_RETURN_IF_ERROR(r.Real("factor", true, true, kMaxRopeParam, &rs->factor));
  DSV4_RETURN_IF_ERROR(r.Int("original_max_position_embeddings", true, 1, kMaxPositions,
                             &rs->original_max_position_embeddings));
  DSV4_RETURN_IF_ERROR(r.Real("beta_fast", false, true, kMaxRopeParam, &rs->beta_fast));
  DSV4_RETURN_IF_ERROR(r.Real("beta_slow", false, true, kMaxRopeParam, &rs->beta_slow));
  return Status::Ok();
}

Status ParseQuantization(const FieldReader& top, QuantizationConfig* q) {
  DSV4_ASSIGN_OR_RETURN(const json* obj, top.Object("quantization_config", /*required=*/true));
  FieldReader r(*obj, top.file(), "quantization_config.");
  DSV4_RETURN_IF_ERROR(r.Str("quant_method", true, &q->quant_method));
  DSV4_RETURN_IF_ERROR(r.Str("fmt", false, &q->fmt));
  DSV4_RETURN_IF_ERROR(r.Str("scale_fmt", false, &q->scale_fmt));
  DSV4_RETURN_IF_ERROR(r.Str("activation_scheme", false, &q->activation_scheme));
  DSV4_RETURN_IF_ERROR(r.IntList("weight_block_size", false, &q->weight_block_size));
  DSV4_RETURN_IF_ERROR(r.Str("format", false, &q->format));
  return Status::Ok();
}

// eos_token_id is an integer in DeepSeek configs; HF also allows a list, of
// which the first entry is the primary end-of-sequence token.
Status ParseEos(const FieldReader& r, const json& root, int64_t* out) {
  auto it = root.find("eos_token_id");
  if (it != root.end() && it->is_array()) {
    if (it->empty() || !(*it)[0].is_number_unsigned()) {
      return r.Error("eos_token_id", "must be a non-negative integer or a list of them");
    }
    *out = (*it)[0].get<int64_t>();
    return Status::Ok();
  }
  return r.Int("eos_token_id", false, 0, kMaxVocab, out);
}

Status ParseFields(const json& root, const std::string& file, ModelConfig* c) {
  FieldReader r(root, file, "");
  DSV4_RETURN_IF_ERROR(r.Str("model_type", true, &c->model_type));
  DSV4_RETURN_IF_ERROR(r.StrList("architectures", false, &c->architectures));
  DSV4_RETURN_IF_ERROR(r.Int("vocab_size", true, 1, kMaxVocab, &c->vocab_size));
  DSV4_RETURN_IF_ERROR(r.Int("hidden_size", true, 1, kMaxWidth, &c->hidden_size));
  DSV4_RETURN_IF_ERROR(r.Int("num_hidden_layers", true, 1, kMaxLayers, &c->num_hidden_layers));
  DSV4_RETURN_IF_ERROR(r.Int("num_attention_heads", true, 1, kMaxHeads, &c->num_attention_heads));
  DSV4_RETURN_IF_ERROR(r.Int("num_key_value_heads", false, 1, kMaxHeads, &c->num_key_value_heads));
  DSV4_RETURN_IF_ERROR(r.Int("head_dim", true, 1, kMaxHeadDim, &c->head_dim));
  DSV4_RETURN_IF_ERROR(r.Int("qk_rope_head_dim", true, 1, kMaxHeadDim, &c->qk_rope_head_dim));
  DSV4_RETURN_IF_ERROR(r.Int("q_lora_rank", true, 1, kMaxWidth, &c->q_lora_rank));
  DSV4_RETURN_IF_ERROR(r.Int("o_lora_rank", true, 1, kMaxWidth, &c->o_lora_rank));
  DSV4_RETURN_IF_ERROR(r.Int("o_groups", true, 1, kMaxHeads, &c->o_groups));
  DSV4_RETURN_IF_ERROR(r.Int("sliding_window", true, 1, kMaxWindow, &c->sliding_window));
  DSV4_RETURN_IF_ERROR(r.IntList("compress_ratios", true, &c->compress_ratios));
  DSV4_RETURN_IF_ERROR(
      r.Real("compress_rope_theta", true, true, kMaxRopeTheta, &c->compress_rope_theta));
  DSV4_RETURN_IF_ERROR(r.Real("rope_theta", true, true, kMaxRopeTheta, &c->rope_theta));
  DSV4_RETURN_IF_ERROR(ParseRopeScaling(r, &c->rope_scaling));
  DSV4_RETURN_IF_ERROR(
      r.Int("max_position_embeddings", true, 1, kMaxPositions, &c->max_position_embeddings));
  DSV4_RETURN_IF_ERROR(r.Int("index_n_heads", true, 0, kMaxHeads, &c->index_n_heads));
  DSV4_RETURN_IF_ERROR(r.Int("index_head_dim", true, 0, kMaxHeadDim, &c->index_head_dim));
  DSV4_RETURN_IF_ERROR(r.Int("index_topk", true, 0, kMaxIndexTopk, &c->index_topk));
  DSV4_RETURN_IF_ERROR(r.Int("n_routed_experts", true, 1, kMaxExperts, &c->n_routed_experts));
  DSV4_RETURN_IF_ERROR(r.Int("num_experts_per_tok", true, 1, kMaxExperts, &c->num_experts_per_tok));
  DSV4_RETURN_IF_ERROR(r.Int("n_shared_experts", true, 0, kMaxSharedExperts, &c->n_shared_experts));
  DSV4_RETURN_IF_ERROR(
      r.Int("moe_intermediate_size", true, 1, kMaxWidth, &c->moe_intermediate_size));
  DSV4_RETURN_IF_ERROR(r.Int("num_hash_layers", true, 0, kMaxLayers, &c->num_hash_layers));
  DSV4_RETURN_IF_ERROR(r.Str("scoring_func", true, &c->scoring_func));
  DSV4_RETURN_IF_ERROR(r.Str("topk_method", false, &c->topk_method));
  DSV4_RETURN_IF_ERROR(r.Bool("norm_topk_prob", false, &c->norm_topk_prob));
  DSV4_RETURN_IF_ERROR(
      r.Real("routed_scaling_factor", true, true, kMaxScale, &c->routed_scaling_factor));
  DSV4_RETURN_IF_ERROR(r.Real("swiglu_limit", true, false, kMaxSwigluLimit, &c->swiglu_limit));
  DSV4_RETURN_IF_ERROR(r.Int("hc_mult", true, 1, kMaxHcMult, &c->hc_mult));
  DSV4_RETURN_IF_ERROR(
      r.Int("hc_sinkhorn_iters", true, 1, kMaxSinkhornIters, &c->hc_sinkhorn_iters));
  // The reference (ModelArgs, inference/model.py) defaults both epsilons to 1e-6.
  DSV4_RETURN_IF_ERROR(r.Real("hc_eps", false, true, kMaxEps, &c->hc_eps));
  DSV4_RETURN_IF_ERROR(r.Real("rms_norm_eps", false, true, kMaxEps, &c->rms_norm_eps));
  DSV4_RETURN_IF_ERROR(r.Str("hidden_act", false, &c->hidden_act));
  DSV4_RETURN_IF_ERROR(
      r.Int("num_nextn_predict_layers", false, 0, kMaxMtpLayers, &c->num_nextn_predict_layers));
  DSV4_RETURN_IF_ERROR(r.Bool("tie_word_embeddings", false, &c->tie_word_embeddings));
  DSV4_RETURN_IF_ERROR(r.Int("bos_token_id", false, 0, kMaxVocab, &c->bos_token_id));
  DSV4_RETURN_IF_ERROR(ParseEos(r, root, &c->eos_token_id));
  DSV4_RETURN_IF_ERROR(r.Str("torch_dtype", false, &c->torch_dtype));
  DSV4_RETURN_IF_ERROR(r.Str("expert_dtype", false, &c->expert_dtype));
  DSV4_RETURN_IF_ERROR(ParseQuantization(r, &c->quantization));
  DSV4_RETURN_IF_ERROR(r.Bool("attention_bias", false, &c->attention_bias));
  DSV4_RETURN_IF_ERROR(r.Real("attention_dropout", false, false, 1.0, &c->attention_dropout));
  DSV4_RETURN_IF_ERROR(r.Real("initializer_range", false, false, 1.0, &c->initializer_range));
  DSV4_RETURN_IF_ERROR(r.Bool("use_cache", false, &c->use_cache));
  DSV4_RETURN_IF_ERROR(r.Str("transformers_version", false, &c->transformers_version));
  return Status::Ok();
}

bool IsPowerOfTwo(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

Status ValidateQuantization(const QuantizationConfig& q, const std::string& file) {
  auto bad = [&](const std::string& field, const std::string& what) {
    return InvalidArgument("{}: field 'quantization_config.{}' {}", file, field, what);
  };
  if (q.is_w8a8()) return Status::Ok();  // layout fixed by docs/convert.md; weight spec checks it
  if (!q.is_native_fp8()) {
    return bad("quant_method",
               "must be \"fp8\" or \"compressed-tensors\", got \"" + q.quant_method + "\"");
  }
  if (q.fmt != "e4m3") return bad("fmt", "must be \"e4m3\" for fp8, got \"" + q.fmt + "\"");
  if (q.scale_fmt != "ue8m0") {
    return bad("scale_fmt", "must be \"ue8m0\" for fp8, got \"" + q.scale_fmt + "\"");
  }
  if (!q.activation_scheme.empty() && q.activation_scheme != "dynamic") {
    return bad("activation_scheme", "must be \"dynamic\", got \"" + q.activation_scheme + "\"");
  }
  if (q.weight_block_size != std::vector<int64_t>{128, 128}) {
    return bad("weight_block_size", "must be [128, 128] for fp8");
  }
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& file) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return InvalidArgument("{}: not valid JSON", file);
  if (!root.is_object()) return InvalidArgument("{}: top-level JSON value is not an object", file);
  ModelConfig cfg;
  DSV4_RETURN_IF_ERROR(ParseFields(root, file, &cfg));
  DSV4_RETURN_IF_ERROR(ValidateModelConfig(cfg, file));
  return cfg;
}

Result<ModelConfig> LoadModelConfig(const std::string& dir) {
  DSV4_RETURN_IF_ERROR(CheckDirectory(dir, "model directory"));
  const std::string path = dir + "/config.json";
  DSV4_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseModelConfig(text, path);
}

Status ValidateModelConfig(const ModelConfig& c, const std::string& file) {
  auto bad = [&](const std::string& field, const std::string& what) {
    return InvalidArgument("{}: field '{}' {}", file, field, what);
  };
  if (c.model_type != "deepseek_v4") {
    return bad("model_type", "must be \"deepseek_v4\", got \"" + c.model_type + "\"");
  }
  const auto num_ratios = static_cast<int64_t>(c.compress_ratios.size());
  if (num_ratios != c.num_layers_with_mtp()) {
    return bad("compress_ratios",
               fmt::format("has {} entries, expected num_hidden_layers + num_nextn_predict_layers "
                           "= {} + {} = {}",
                           num_ratios, c.num_hidden_layers, c.num_nextn_predict_layers,
                           c.num_layers_with_mtp()));
  }
  bool any_csa = false;
  for (size_t i = 0; i < c.compress_ratios.size(); ++i) {
    const int64_t r = c.compress_ratios[i];
    if (r != 0 && r != 4 && r != 128) {
      return bad("compress_ratios", fmt::format("entry {} is {}; supported ratios are 0 "
                                                "(window only), 4 (CSA) and 128 (HCA)",
                                                i, r));
    }
    any_csa = any_csa || r == 4;
  }
  if (c.num_key_value_heads != 1) return bad("num_key_value_heads", "must be 1 (shared latent KV)");
  if (c.head_dim <= c.qk_rope_head_dim) return bad("head_dim", "must exceed qk_rope_head_dim");
  if (c.qk_rope_head_dim % 2 != 0) return bad("qk_rope_head_dim", "must be even (RoPE pairs)");
  if (c.num_attention_heads % c.o_groups != 0) {
    return bad("num_attention_heads",
               fmt::format("must be divisible by o_groups ({})", c.o_groups));
  }
  // Every FP8/FP4 GEMM quantizes its activation in 1x128 blocks along K
  // (docs/model.md "Number formats"), so each such K must be a whole number of blocks.
  const std::pair<const char*, int64_t> gemm_inputs[] = {
      {"hidden_size", c.hidden_size},
      {"q_lora_rank", c.q_lora_rank},
      {"moe_intermediate_size", c.moe_intermediate_size}};
  for (const auto& [name, k] : gemm_inputs) {
    if (k % 128 != 0) return bad(name, "must be a multiple of 128 (activation quant blocks)");
  }
  if ((c.o_groups * c.o_lora_rank) % 128 != 0) {
    return bad("o_lora_rank", "times o_groups must be a multiple of 128 (activation quant blocks)");
  }
  if (any_csa) {
    if (c.index_topk <= 0) return bad("index_topk", "must be positive when a layer has ratio 4");
    if (c.index_n_heads <= 0) {
      return bad("index_n_heads", "must be positive when a layer has ratio 4");
    }
    // The indexer rotates q/k with a Hadamard transform over index_head_dim
    // and applies RoPE to its last qk_rope_head_dim dims.
    if (!IsPowerOfTwo(c.index_head_dim) || c.index_head_dim <= c.qk_rope_head_dim) {
      return bad("index_head_dim", "must be a power of two larger than qk_rope_head_dim");
    }
  }
  if (c.num_experts_per_tok > c.n_routed_experts) {
    return bad("num_experts_per_tok",
               fmt::format("must not exceed n_routed_experts ({})", c.n_routed_experts));
  }
  if (c.num_hash_layers > c.num_hidden_layers) {
    return bad("num_hash_layers", "must not exceed num_hidden_layers");
  }
  if (c.hc_mult < 1) return bad("hc_mult", "must be at least 1");
  if (c.scoring_func != "sqrtsoftplus") {
    return bad("scoring_func", "must be \"sqrtsoftplus\", got \"" + c.scoring_func + "\"");
  }
  if (!c.topk_method.empty() && c.topk_method != "noaux_tc") {
    return bad("topk_method", "must be \"noaux_tc\", got \"" + c.topk_method + "\"");
  }
  if (!c.hidden_act.empty() && c.hidden_act != "silu") {
    return bad("hidden_act", "must be \"silu\", got \"" + c.hidden_act + "\"");
  }
  if (c.tie_word_embeddings) return bad("tie_word_embeddings", "must be false (separate head)");
  if (c.bos_token_id >= c.vocab_size) return bad("bos_token_id", "must be below vocab_size");
  if (c.eos_token_id >= c.vocab_size) return bad("eos_token_id", "must be below vocab_size");
  if (!c.rope_scaling.type.empty() && c.rope_scaling.type != "yarn") {
    return bad("rope_scaling.type", "must be \"yarn\", got \"" + c.rope_scaling.type + "\"");
  }
  if (!c.expert_dtype.empty() && c.expert_dtype != "fp4") {
    return bad("expert_dtype", "must be \"fp4\" (or absent), got \"" + c.expert_dtype + "\"");
  }
  return ValidateQuantization(c.quantization, file);
}

}  // namespace dsv4::checkpoint
