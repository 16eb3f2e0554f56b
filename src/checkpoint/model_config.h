// DeepSeek-V4 configuration from a Hugging Face config.json (docs/checkpoint.md "config.json").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4::checkpoint {

struct RopeScaling {
  std::string type;  // "yarn" or empty (none)
  double factor = 1;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32;
  double beta_slow = 1;
};

struct QuantizationConfig {
  std::string quant_method;  // "fp8" (native) or "compressed-tensors" (W8A8)
  std::string fmt;           // "e4m3"
  std::string scale_fmt;     // "ue8m0"
  std::string activation_scheme;
  std::vector<int64_t> weight_block_size;  // [128, 128]
  std::string format;                      // compressed-tensors only, e.g. "int-quantized"

  bool is_native_fp8() const { return quant_method == "fp8"; }
  bool is_w8a8() const { return quant_method == "compressed-tensors"; }
};

struct ModelConfig {
  std::string model_type;  // "deepseek_v4"
  std::vector<std::string> architectures;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;  // D
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;  // H
  int64_t num_key_value_heads = 1;
  int64_t head_dim = 0;          // d (nope + rope)
  int64_t qk_rope_head_dim = 0;  // rd
  int64_t q_lora_rank = 0;
  int64_t o_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t sliding_window = 0;
  std::vector<int64_t> compress_ratios;  // num_hidden_layers + num_nextn_predict_layers
  double compress_rope_theta = 0;
  double rope_theta = 0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_shared_experts = 0;
  int64_t moe_intermediate_size = 0;
  int64_t num_hash_layers = 0;
  std::string scoring_func;  // "sqrtsoftplus"
  std::string topk_method;   // "noaux_tc"
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1;
  double swiglu_limit = 0;
  int64_t hc_mult = 0;
  int64_t hc_sinkhorn_iters = 0;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-6;
  std::string hidden_act;  // "silu"
  int64_t num_nextn_predict_layers = 0;
  bool tie_word_embeddings = false;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  std::string torch_dtype;
  std::string expert_dtype;  // "fp4" or empty (initial HF revision: also FP4 on disk)
  QuantizationConfig quantization;
  // Present in the HF config, unused at inference; parsed for type checks.
  bool attention_bias = false;
  double attention_dropout = 0;
  double initializer_range = 0;
  bool use_cache = true;
  std::string transformers_version;

  // Derived helpers.
  int64_t nope_head_dim() const { return head_dim - qk_rope_head_dim; }
  int64_t num_layers_with_mtp() const { return num_hidden_layers + num_nextn_predict_layers; }
  int64_t hc_mix() const { return (2 + hc_mult) * hc_mult; }
  // Ratio of layer id (main layers 0..L-1, MTP layers L..).
  int64_t compress_ratio(int64_t layer) const {
    return compress_ratios[static_cast<size_t>(layer)];
  }
  bool is_hash_layer(int64_t layer) const { return layer < num_hash_layers; }
};

// Parses and validates config.json text; `file` names the file in messages.
Result<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& file);
// Reads <dir>/config.json.
Result<ModelConfig> LoadModelConfig(const std::string& dir);
// Checks internal consistency (e.g. compress_ratios length, ratios in {0,4,128});
// docs/checkpoint.md lists every rule.  ParseModelConfig already calls it.
Status ValidateModelConfig(const ModelConfig& cfg, const std::string& file);

}  // namespace dsv4::checkpoint
