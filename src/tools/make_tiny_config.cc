#include "tools/make_tiny_config.h"

#include <nlohmann/json.hpp>

namespace dsv4::tools {

namespace {

using Json = nlohmann::json;  // std::map: keys dump in alphabetical order, as HF writes them

// The fields shared by every preset: the Flash values (docs/checkpoint.md
// "DeepSeek-V4-Flash values") for everything that is not a size.
Json FlashCommon() {
  Json c = Json::object();
  c["architectures"] = {"DeepseekV4ForCausalLM"};
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["bos_token_id"] = 0;
  c["compress_rope_theta"] = 160000;
  c["eos_token_id"] = 1;
  c["expert_dtype"] = "fp4";
  c["hc_eps"] = 1e-06;
  c["hc_mult"] = 4;
  c["hc_sinkhorn_iters"] = 20;
  c["hidden_act"] = "silu";
  c["initializer_range"] = 0.02;
  c["max_position_embeddings"] = 1048576;
  c["model_type"] = "deepseek_v4";
  c["n_shared_experts"] = 1;
  c["norm_topk_prob"] = true;
  c["num_hash_layers"] = 3;
  c["num_key_value_heads"] = 1;
  c["num_nextn_predict_layers"] = 1;
  c["qk_rope_head_dim"] = 64;
  c["quantization_config"] = {{"activation_scheme", "dynamic"},
                              {"fmt", "e4m3"},
                              {"quant_method", "fp8"},
                              {"scale_fmt", "ue8m0"},
                              {"weight_block_size", {128, 128}}};
  c["rms_norm_eps"] = 1e-06;
  c["rope_scaling"] = {{"beta_fast", 32},
                       {"beta_slow", 1},
                       {"factor", 16},
                       {"original_max_position_embeddings", 65536},
                       {"type", "yarn"}};
  c["rope_theta"] = 10000;
  c["routed_scaling_factor"] = 1.5;
  c["scoring_func"] = "sqrtsoftplus";
  c["swiglu_limit"] = 10.0;
  c["tie_word_embeddings"] = false;
  c["topk_method"] = "noaux_tc";
  c["torch_dtype"] = "bfloat16";
  c["transformers_version"] = "4.57.1";
  c["use_cache"] = true;
  return c;
}

// Layers 0,1 window only, then CSA/HCA alternating, MTP window only: the
// Flash schedule cut to 6 main layers (all three kinds, two of each).
Json SixLayerRatios() { return Json::array({0, 0, 4, 128, 4, 128, 0}); }

Json TinyPreset() {
  Json c = FlashCommon();
  c["compress_ratios"] = SixLayerRatios();
  c["head_dim"] = 128;
  c["hidden_size"] = 256;
  c["index_head_dim"] = 128;
  c["index_n_heads"] = 4;
  c["index_topk"] = 8;
  c["moe_intermediate_size"] = 128;
  c["n_routed_experts"] = 8;
  c["num_attention_heads"] = 4;
  c["num_experts_per_tok"] = 2;
  c["num_hidden_layers"] = 6;
  c["o_groups"] = 2;
  c["o_lora_rank"] = 128;
  c["q_lora_rank"] = 128;
  c["sliding_window"] = 16;
  c["vocab_size"] = 4096;
  return c;
}

Json BenchPreset() {
  Json c = FlashCommon();
  c["compress_ratios"] = SixLayerRatios();
  c["head_dim"] = 512;
  c["hidden_size"] = 4096;
  c["index_head_dim"] = 128;
  c["index_n_heads"] = 64;
  c["index_topk"] = 512;
  c["moe_intermediate_size"] = 2048;
  c["n_routed_experts"] = 8;
  c["num_attention_heads"] = 64;
  c["num_experts_per_tok"] = 6;
  c["num_hidden_layers"] = 6;
  c["o_groups"] = 8;
  c["o_lora_rank"] = 1024;
  c["q_lora_rank"] = 1024;
  c["sliding_window"] = 128;
  c["vocab_size"] = 16384;
  return c;
}

// `bench` with 64 routed experts (6 active): two rows of a verify step share
// ~0.6 experts, as on Flash (256 experts: ~0.14), where `bench`'s 8 make
// them share ~4.5 and run most experts at M = 2.  For MTP step costs
// (docs/performance.md); 6.8 GiB of weights (the MTP block has 64 too).
Json BenchMoe64Preset() {
  Json c = BenchPreset();
  c["n_routed_experts"] = 64;
  return c;
}

std::string Dump(const Json& c) { return c.dump(2) + "\n"; }

}  // namespace

std::vector<std::string> MakeTinyPresetNames() { return {"tiny", "bench", "bench-moe64"}; }

Result<std::string> PresetConfigJson(const std::string& preset) {
  if (preset == "tiny") return Dump(TinyPreset());
  if (preset == "bench") return Dump(BenchPreset());
  if (preset == "bench-moe64") return Dump(BenchMoe64Preset());
  return InvalidArgument("unknown make-tiny preset '{}' (known: tiny, bench, bench-moe64)", preset);
}

std::string GenerationConfigJson() {
  Json g = Json::object();
  g["_from_model_config"] = true;
  g["bos_token_id"] = 0;
  g["do_sample"] = true;
  g["eos_token_id"] = 1;
  g["temperature"] = 1.0;
  g["top_p"] = 1.0;
  g["transformers_version"] = "4.57.1";
  return g.dump(2) + "\n";
}

}  // namespace dsv4::tools
