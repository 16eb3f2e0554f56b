// config.json parsing and validation: tiny-a parses to the documented values;
// each bad field yields "config.json: field '<name>' ..." on one line.

#include "checkpoint/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "checkpoint_test_util.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json TinyConfig() { return json::parse(testing::ReadText(testing::TinyADir() + "/config.json")); }

// Parses tiny-a's config after `edit`; returns the error message ("" if OK).
template <typename Edit>
std::string ErrorAfter(Edit edit) {
  json j = TinyConfig();
  edit(j);
  auto r = checkpoint::ParseModelConfig(j.dump(), "config.json");
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  return r.status().message();
}

TEST(ModelConfig, LoadsTinyA) {
  auto r = checkpoint::LoadModelConfig(testing::TinyADir());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const checkpoint::ModelConfig& c = *r;
  EXPECT_EQ(c.model_type, "deepseek_v4");
  EXPECT_EQ(c.architectures, std::vector<std::string>{"DeepseekV4ForCausalLM"});
  EXPECT_EQ(c.vocab_size, 1024);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 1);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.nope_head_dim(), 64);
  EXPECT_EQ(c.q_lora_rank, 128);
  EXPECT_EQ(c.o_lora_rank, 128);
  EXPECT_EQ(c.o_groups, 2);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.compress_ratios, (std::vector<int64_t>{0, 0, 4, 128, 4, 128, 0}));
  EXPECT_EQ(c.compress_rope_theta, 160000);
  EXPECT_EQ(c.rope_theta, 10000);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_EQ(c.rope_scaling.factor, 16);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 65536);
  EXPECT_EQ(c.rope_scaling.beta_fast, 32);
  EXPECT_EQ(c.rope_scaling.beta_slow, 1);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.index_n_heads, 4);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 8);
  EXPECT_EQ(c.n_routed_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.n_shared_experts, 1);
  EXPECT_EQ(c.moe_intermediate_size, 128);
  EXPECT_EQ(c.num_hash_layers, 3);
  EXPECT_TRUE(c.is_hash_layer(2));
  EXPECT_FALSE(c.is_hash_layer(3));
  EXPECT_EQ(c.scoring_func, "sqrtsoftplus");
  EXPECT_EQ(c.topk_method, "noaux_tc");
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_mix(), 24);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.hc_eps, 1e-6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.num_layers_with_mtp(), 7);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_id, 1);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.expert_dtype, "fp4");
  EXPECT_EQ(c.quantization.quant_method, "fp8");
  EXPECT_TRUE(c.quantization.is_native_fp8());
  EXPECT_EQ(c.quantization.fmt, "e4m3");
  EXPECT_EQ(c.quantization.scale_fmt, "ue8m0");
  EXPECT_EQ(c.quantization.activation_scheme, "dynamic");
  EXPECT_EQ(c.quantization.weight_block_size, (std::vector<int64_t>{128, 128}));
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.attention_dropout, 0.0);
  EXPECT_EQ(c.initializer_range, 0.02);
  EXPECT_TRUE(c.use_cache);
  EXPECT_EQ(c.transformers_version, "4.57.1");
}

TEST(ModelConfig, FileErrors) {
  auto missing = checkpoint::LoadModelConfig("/nonexistent/dir");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("model directory /nonexistent/dir does not exist"));
  testing::TempDir dir;
  EXPECT_THAT(checkpoint::LoadModelConfig(dir.path()).status().message(),
              HasSubstr(dir.File("config.json") + ": no such file"));
  EXPECT_EQ(checkpoint::ParseModelConfig("{", "config.json").status().message(),
            "config.json: not valid JSON");
  EXPECT_THAT(checkpoint::ParseModelConfig("[1]", "config.json").status().message(),
              HasSubstr("top-level JSON value is not an object"));
}

TEST(ModelConfig, TypeErrors) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["hidden_size"] = "256"; }),
            "config.json: field 'hidden_size' must be a positive integer");
  EXPECT_EQ(ErrorAfter([](json& j) { j["hidden_size"] = 0; }),
            "config.json: field 'hidden_size' must be a positive integer");
  EXPECT_EQ(ErrorAfter([](json& j) { j["hidden_size"] = 256.5; }),
            "config.json: field 'hidden_size' must be a positive integer");
  EXPECT_EQ(ErrorAfter([](json& j) { j.erase("vocab_size"); }),
            "config.json: field 'vocab_size' is missing");
  EXPECT_EQ(ErrorAfter([](json& j) { j["num_hash_layers"] = -1; }),
            "config.json: field 'num_hash_layers' must be a non-negative integer");
  EXPECT_EQ(ErrorAfter([](json& j) { j["rope_theta"] = "big"; }),
            "config.json: field 'rope_theta' must be a positive number");
  EXPECT_EQ(ErrorAfter([](json& j) { j["norm_topk_prob"] = 1; }),
            "config.json: field 'norm_topk_prob' must be true or false");
  EXPECT_EQ(ErrorAfter([](json& j) { j["scoring_func"] = 3; }),
            "config.json: field 'scoring_func' must be a string");
  EXPECT_EQ(ErrorAfter([](json& j) {
              j["compress_ratios"] = {0, -4};
            }),
            "config.json: field 'compress_ratios' must be a list of non-negative integers");
  EXPECT_EQ(ErrorAfter([](json& j) { j["architectures"] = "x"; }),
            "config.json: field 'architectures' must be a list of strings");
  EXPECT_EQ(ErrorAfter([](json& j) { j["rope_scaling"]["factor"] = "16"; }),
            "config.json: field 'rope_scaling.factor' must be a positive number");
  EXPECT_EQ(ErrorAfter([](json& j) { j["rope_scaling"] = 3; }),
            "config.json: field 'rope_scaling' must be an object");
  EXPECT_EQ(ErrorAfter([](json& j) { j["quantization_config"]["weight_block_size"] = "128"; }),
            "config.json: field 'quantization_config.weight_block_size' must be a list of "
            "non-negative integers");
  EXPECT_EQ(ErrorAfter([](json& j) { j.erase("quantization_config"); }),
            "config.json: field 'quantization_config' is missing");
  EXPECT_EQ(ErrorAfter([](json& j) { j["use_cache"] = "yes"; }),
            "config.json: field 'use_cache' must be true or false");
  EXPECT_EQ(ErrorAfter([](json& j) { j["vocab_size"] = 18446744073709551615ull; }),
            "config.json: field 'vocab_size' must be a positive integer");
}

// Every field that sizes memory or a loop has an upper bound (docs/checkpoint.md
// "Field ranges"): above it, one line naming the field, the value and the
// bound, before anything is allocated.
TEST(ModelConfig, RangeErrors) {
  struct Case {
    const char* field;
    double bound;
  };
  const Case cases[] = {{"vocab_size", 16777216},
                        {"hidden_size", 65536},
                        {"num_hidden_layers", 1024},
                        {"num_attention_heads", 1024},
                        {"num_key_value_heads", 1024},
                        {"head_dim", 4096},
                        {"qk_rope_head_dim", 4096},
                        {"q_lora_rank", 65536},
                        {"o_lora_rank", 65536},
                        {"o_groups", 1024},
                        {"sliding_window", 65536},
                        {"max_position_embeddings", 268435456},
                        {"index_n_heads", 1024},
                        {"index_head_dim", 4096},
                        {"index_topk", 16384},
                        {"n_routed_experts", 4096},
                        {"num_experts_per_tok", 4096},
                        {"n_shared_experts", 64},
                        {"moe_intermediate_size", 65536},
                        {"num_hash_layers", 1024},
                        {"hc_mult", 16},
                        {"hc_sinkhorn_iters", 1000},
                        {"num_nextn_predict_layers", 16},
                        {"bos_token_id", 16777216},
                        {"eos_token_id", 16777216}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    const auto above = static_cast<int64_t>(c.bound) + 1;
    EXPECT_EQ(ErrorAfter([&](json& j) { j[c.field] = above; }),
              fmt::format("config.json: field '{}' is {}, above the {} this engine accepts",
                          c.field, above, static_cast<int64_t>(c.bound)));
  }
  const Case reals[] = {{"rope_theta", 1e12},
                        {"compress_rope_theta", 1e12},
                        {"routed_scaling_factor", 1000},
                        {"swiglu_limit", 1e6},
                        {"hc_eps", 1},
                        {"rms_norm_eps", 1},
                        {"attention_dropout", 1},
                        {"initializer_range", 1}};
  for (const Case& c : reals) {
    SCOPED_TRACE(c.field);
    EXPECT_THAT(ErrorAfter([&](json& j) { j[c.field] = c.bound * 2; }),
                HasSubstr(fmt::format("field '{}' is", c.field)));
    EXPECT_THAT(ErrorAfter([&](json& j) { j[c.field] = c.bound * 2; }),
                HasSubstr("this engine accepts"));
  }
  for (const char* f : {"factor", "beta_fast", "beta_slow"}) {
    SCOPED_TRACE(f);
    EXPECT_THAT(ErrorAfter([&](json& j) { j["rope_scaling"][f] = 1e5; }),
                HasSubstr(fmt::format("field 'rope_scaling.{}' is 100000, above the 10000", f)));
  }
  EXPECT_THAT(ErrorAfter([](json& j) {
                j["rope_scaling"]["original_max_position_embeddings"] = int64_t{1} << 29;
              }),
              HasSubstr("'rope_scaling.original_max_position_embeddings' is 536870912"));
  // The two runaway examples: 5.9 GB of top-k buffers, a billion Sinkhorn
  // iterations per token and layer.
  EXPECT_THAT(ErrorAfter([](json& j) { j["index_topk"] = 1000000000; }),
              HasSubstr("field 'index_topk' is 1000000000, above the 16384"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["hc_sinkhorn_iters"] = 1000000000; }),
              HasSubstr("field 'hc_sinkhorn_iters' is 1000000000, above the 1000"));
  // The bounds themselves are accepted where no other rule ties the field.
  for (const Case& c :
       {Case{"index_topk", 16384}, Case{"hc_sinkhorn_iters", 1000}, Case{"sliding_window", 65536},
        Case{"n_shared_experts", 64}, Case{"max_position_embeddings", 268435456}}) {
    SCOPED_TRACE(c.field);
    EXPECT_EQ(ErrorAfter([&](json& j) { j[c.field] = static_cast<int64_t>(c.bound); }), "");
  }
  for (const Case& c : reals) {
    SCOPED_TRACE(c.field);
    EXPECT_EQ(ErrorAfter([&](json& j) { j[c.field] = c.bound; }), "");
  }
}

TEST(ModelConfig, ConsistencyErrors) {
  EXPECT_EQ(ErrorAfter([](json& j) { j["model_type"] = "deepseek_v3"; }),
            "config.json: field 'model_type' must be \"deepseek_v4\", got \"deepseek_v3\"");
  EXPECT_EQ(ErrorAfter([](json& j) { j["compress_ratios"] = {0, 0, 4, 128, 4, 128}; }),
            "config.json: field 'compress_ratios' has 6 entries, expected num_hidden_layers + "
            "num_nextn_predict_layers = 6 + 1 = 7");
  EXPECT_THAT(ErrorAfter([](json& j) { j["compress_ratios"][3] = 64; }),
              HasSubstr("field 'compress_ratios' entry 3 is 64; supported ratios are 0"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["head_dim"] = 64; }),
              HasSubstr("field 'head_dim' must exceed qk_rope_head_dim"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["qk_rope_head_dim"] = 63; }),
              HasSubstr("field 'qk_rope_head_dim' must be even"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["o_groups"] = 3; }),
              HasSubstr("field 'num_attention_heads' must be divisible by o_groups (3)"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["index_topk"] = 0; }),
              HasSubstr("field 'index_topk' must be positive when a layer has ratio 4"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["index_head_dim"] = 96; }),
              HasSubstr("field 'index_head_dim' must be a power of two"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["num_experts_per_tok"] = 9; }),
              HasSubstr("field 'num_experts_per_tok' must not exceed n_routed_experts (8)"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["hc_mult"] = 0; }),
              HasSubstr("field 'hc_mult' must be a positive integer"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["num_hash_layers"] = 7; }),
              HasSubstr("field 'num_hash_layers' must not exceed num_hidden_layers"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["scoring_func"] = "sigmoid"; }),
              HasSubstr("field 'scoring_func' must be \"sqrtsoftplus\""));
  EXPECT_THAT(ErrorAfter([](json& j) { j["num_key_value_heads"] = 4; }),
              HasSubstr("field 'num_key_value_heads' must be 1"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["hidden_size"] = 320; }),
              HasSubstr("field 'hidden_size' must be a multiple of 128"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["eos_token_id"] = 1024; }),
              HasSubstr("field 'eos_token_id' must be below vocab_size"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["tie_word_embeddings"] = true; }),
              HasSubstr("field 'tie_word_embeddings' must be false"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["expert_dtype"] = "fp8"; }),
              HasSubstr("field 'expert_dtype' must be \"fp4\" (or absent)"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["rope_scaling"]["type"] = "linear"; }),
              HasSubstr("field 'rope_scaling.type' must be \"yarn\""));
  EXPECT_THAT(ErrorAfter([](json& j) { j["quantization_config"]["fmt"] = "e5m2"; }),
              HasSubstr("field 'quantization_config.fmt' must be \"e4m3\""));
  EXPECT_THAT(ErrorAfter([](json& j) { j["quantization_config"]["scale_fmt"] = "fp32"; }),
              HasSubstr("field 'quantization_config.scale_fmt' must be \"ue8m0\""));
  EXPECT_THAT(ErrorAfter([](json& j) {
                j["quantization_config"]["weight_block_size"] = {64, 64};
              }),
              HasSubstr("field 'quantization_config.weight_block_size' must be [128, 128]"));
  EXPECT_THAT(ErrorAfter([](json& j) { j["quantization_config"]["quant_method"] = "awq"; }),
              HasSubstr("field 'quantization_config.quant_method' must be \"fp8\" or"));
}

TEST(ModelConfig, AcceptedVariations) {
  // Unknown fields are ignored; optional fields fall back to reference defaults.
  EXPECT_EQ(ErrorAfter([](json& j) { j["some_future_field"] = {{"x", 1}}; }), "");
  json j = TinyConfig();
  j.erase("hc_eps");
  j.erase("rms_norm_eps");
  j.erase("expert_dtype");  // initial HF revision
  j["rope_scaling"].erase("type");
  j["rope_scaling"]["rope_type"] = "yarn";
  j["eos_token_id"] = {1, 2};
  auto r = checkpoint::ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->hc_eps, 1e-6);
  EXPECT_EQ(r->rope_scaling.type, "yarn");
  EXPECT_EQ(r->eos_token_id, 1);
  // Without rope_scaling there is no YaRN; a model with no CSA layer needs no indexer.
  j = TinyConfig();
  j.erase("rope_scaling");
  j["compress_ratios"] = {0, 0, 128, 128, 0, 128, 0};
  j["index_topk"] = 0;
  r = checkpoint::ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rope_scaling.type, "");
}

TEST(ModelConfig, CompressedTensorsIsAccepted) {
  json j = TinyConfig();
  j["quantization_config"] = {{"quant_method", "compressed-tensors"},
                              {"format", "int-quantized"},
                              {"config_groups", {{"group_0", {{"targets", {"Linear"}}}}}}};
  auto r = checkpoint::ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->quantization.is_w8a8());
  EXPECT_EQ(r->quantization.format, "int-quantized");
}

}  // namespace
}  // namespace dsv4
