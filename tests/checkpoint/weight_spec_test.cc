// The expected-tensor list: tiny-a validates against it exactly, the Flash
// config reproduces the official index's counts and shapes (docs/checkpoint.md
// "Expected tensors"), and each checkpoint
// fault is reported as "<file>: tensor '<name>': ...".

#include "checkpoint/weight_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <string>

#include "checkpoint_test_util.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing::kShard1;
using testing::kShard2;
using testing::OwnedTensor;
using testing::TempDir;

checkpoint::ModelConfig TinyA() {
  auto r = checkpoint::LoadModelConfig(testing::TinyADir());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return *r;
}

// DeepSeek-V4-Flash's config.json values (docs/checkpoint.md "DeepSeek-V4-Flash values").
checkpoint::ModelConfig Flash() {
  json j = json::parse(testing::ReadText(testing::TinyADir() + "/config.json"));
  std::vector<int64_t> ratios = {0, 0};
  for (int i = 0; i < 20; ++i) ratios.insert(ratios.end(), {4, 128});
  ratios.insert(ratios.end(), {4, 0});
  j.update(json{{"vocab_size", 129280},
                {"hidden_size", 4096},
                {"num_hidden_layers", 43},
                {"num_attention_heads", 64},
                {"head_dim", 512},
                {"q_lora_rank", 1024},
                {"o_lora_rank", 1024},
                {"o_groups", 8},
                {"sliding_window", 128},
                {"compress_ratios", ratios},
                {"index_n_heads", 64},
                {"index_head_dim", 128},
                {"index_topk", 512},
                {"n_routed_experts", 256},
                {"num_experts_per_tok", 6},
                {"moe_intermediate_size", 2048}});
  auto r = checkpoint::ParseModelConfig(j.dump(), "flash/config.json");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return *r;
}

std::map<std::string, checkpoint::WeightSpec> ByName(
    const std::vector<checkpoint::WeightSpec>& specs) {
  std::map<std::string, checkpoint::WeightSpec> m;
  for (const auto& s : specs) EXPECT_TRUE(m.emplace(s.name, s).second) << "dup " << s.name;
  return m;
}

std::string ValidateError(const std::string& dir) {
  auto ckpt = checkpoint::Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  if (!ckpt.ok()) return "";
  Status s = checkpoint::ValidateCheckpoint(**ckpt, TinyA());
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  return s.message();
}

TEST(WeightSpec, TinyAValidates) {
  auto ckpt = checkpoint::Checkpoint::Open(testing::TinyADir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const checkpoint::ModelConfig cfg = TinyA();
  EXPECT_EQ(checkpoint::ExpectedWeights(cfg).size(), 585u);
  Status s = checkpoint::ValidateCheckpoint(**ckpt, cfg);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(WeightSpec, TinyAShapesFromGoldenReadme) {
  const auto m = ByName(checkpoint::ExpectedWeights(TinyA()));
  auto shape = [&](const std::string& n) { return m.at(n).shape; };
  EXPECT_EQ(shape("layers.0.hc_attn_fn"), (Shape{24, 1024}));
  EXPECT_EQ(shape("hc_head_fn"), (Shape{4, 1024}));
  EXPECT_EQ(shape("layers.0.attn.wo_a.weight"), (Shape{256, 256}));
  EXPECT_EQ(shape("layers.2.attn.compressor.wkv.weight"), (Shape{256, 256}));
  EXPECT_EQ(shape("layers.2.attn.indexer.compressor.ape"), (Shape{4, 256}));
  EXPECT_EQ(shape("layers.3.attn.compressor.ape"), (Shape{128, 128}));
  EXPECT_EQ(shape("layers.1.ffn.experts.7.w2.weight"), (Shape{256, 64}));
  EXPECT_EQ(shape("layers.1.ffn.experts.7.w2.scale"), (Shape{256, 4}));
  EXPECT_EQ(m.at("layers.1.ffn.experts.7.w2.weight").logical_shape, (Shape{256, 128}));
  EXPECT_EQ(m.at("layers.1.ffn.experts.7.w2.weight").kind, checkpoint::WeightSpec::kFp4Weight);
  EXPECT_EQ(m.at("layers.2.ffn.gate.tid2eid").dtype, DType::kI64);
  EXPECT_EQ(m.count("layers.3.ffn.gate.tid2eid"), 0u);
  EXPECT_EQ(m.at("mtp.0.ffn.gate.bias").layer, 6);
  EXPECT_EQ(m.at("embed.weight").layer, -1);
  EXPECT_EQ(m.count("mtp.0.attn.compressor.wkv.weight"), 0u);
}

TEST(WeightSpec, FlashMatchesModelDoc) {
  const std::vector<checkpoint::WeightSpec> specs = checkpoint::ExpectedWeights(Flash());
  EXPECT_EQ(specs.size(), 69187u);  // the official 46-shard index
  std::map<std::string, int> suffix;
  for (const auto& s : specs) {
    const size_t dot = s.name.rfind('.');
    const std::string last = dot == std::string::npos ? s.name : s.name.substr(dot + 1);
    if (last.rfind("hc_", 0) == 0) continue;
    ++suffix[last];
  }
  EXPECT_EQ(suffix["weight"], 34600);
  EXPECT_EQ(suffix["scale"], 34167);
  EXPECT_EQ(suffix["ape"], 62);
  EXPECT_EQ(suffix["attn_sink"], 44);
  EXPECT_EQ(suffix["bias"], 41);
  EXPECT_EQ(suffix["tid2eid"], 3);

  const auto m = ByName(specs);
  auto check = [&](const std::string& n, DType dt, const Shape& shape) {
    ASSERT_EQ(m.count(n), 1u) << n;
    EXPECT_EQ(m.at(n).dtype, dt) << n;
    EXPECT_EQ(m.at(n).shape, shape) << n;
  };
  check("embed.weight", DType::kBF16, {129280, 4096});
  check("hc_head_fn", DType::kF32, {4, 16384});
  check("layers.0.hc_ffn_fn", DType::kF32, {24, 16384});
  check("layers.5.attn.wq_a.scale", DType::kF8E8M0, {8, 32});
  check("layers.5.attn.wq_b.weight", DType::kF8E4M3, {32768, 1024});
  check("layers.5.attn.wq_b.scale", DType::kF8E8M0, {256, 8});
  check("layers.5.attn.wkv.scale", DType::kF8E8M0, {4, 32});
  check("layers.5.attn.wo_a.weight", DType::kF8E4M3, {8192, 4096});
  check("layers.5.attn.wo_a.scale", DType::kF8E8M0, {64, 32});
  check("layers.5.attn.wo_b.scale", DType::kF8E8M0, {32, 64});
  check("layers.0.ffn.gate.tid2eid", DType::kI64, {129280, 6});
  check("layers.3.ffn.gate.bias", DType::kF32, {256});
  check("layers.9.ffn.shared_experts.w2.scale", DType::kF8E8M0, {32, 16});
  check("layers.9.ffn.experts.255.w1.weight", DType::kI8, {2048, 2048});
  check("layers.9.ffn.experts.255.w1.scale", DType::kF8E8M0, {2048, 128});
  check("layers.9.ffn.experts.0.w2.weight", DType::kI8, {4096, 1024});
  check("layers.9.ffn.experts.0.w2.scale", DType::kF8E8M0, {4096, 64});
  check("layers.42.attn.compressor.wgate.weight", DType::kBF16, {1024, 4096});
  check("layers.42.attn.compressor.ape", DType::kF32, {4, 1024});
  check("layers.42.attn.indexer.wq_b.scale", DType::kF8E8M0, {64, 8});
  check("layers.42.attn.indexer.weights_proj.weight", DType::kBF16, {64, 4096});
  check("layers.42.attn.indexer.compressor.wkv.weight", DType::kBF16, {256, 4096});
  check("layers.42.attn.indexer.compressor.norm.weight", DType::kBF16, {128});
  check("layers.41.attn.compressor.wkv.weight", DType::kBF16, {512, 4096});
  check("layers.41.attn.compressor.ape", DType::kF32, {128, 512});
  check("mtp.0.e_proj.scale", DType::kF8E8M0, {32, 32});
  check("mtp.0.hc_head_fn", DType::kF32, {4, 16384});
  EXPECT_EQ(m.count("layers.41.attn.indexer.wq_b.weight"), 0u);
  EXPECT_EQ(m.count("mtp.0.embed.weight"), 0u);
}

TEST(WeightSpec, W8a8Layout) {
  checkpoint::ModelConfig cfg = TinyA();
  cfg.quantization = checkpoint::QuantizationConfig{};
  cfg.quantization.quant_method = "compressed-tensors";
  const auto m = ByName(checkpoint::ExpectedWeights(cfg));
  EXPECT_EQ(m.at("layers.0.attn.wq_a.weight").dtype, DType::kBF16);
  EXPECT_EQ(m.count("layers.0.attn.wq_a.scale"), 0u);
  EXPECT_EQ(m.at("layers.0.attn.wq_b.weight").kind, checkpoint::WeightSpec::kInt8Weight);
  EXPECT_EQ(m.at("layers.0.attn.wq_b.scale").shape, (Shape{512}));
  EXPECT_EQ(m.at("layers.0.attn.wq_b.scale").dtype, DType::kF32);
  EXPECT_EQ(m.at("layers.0.ffn.experts.3.w1.weight").shape, (Shape{128, 256}));  // unpacked
  EXPECT_EQ(m.at("mtp.0.h_proj.weight").dtype, DType::kI8);
  EXPECT_EQ(m.at("layers.2.attn.indexer.wq_b.weight").dtype, DType::kI8);
}

TEST(WeightSpec, WrongDtype) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  testing::EditShard(dir.File(kShard1), [](std::vector<OwnedTensor>& ts) {
    for (auto& t : ts) {
      if (t.name == "layers.0.attn.wq_a.weight") t.dtype = DType::kI8;
    }
  });
  EXPECT_EQ(ValidateError(dir.path()), dir.File(kShard1) +
                                           ": tensor 'layers.0.attn.wq_a.weight': expected "
                                           "F8_E4M3 [128, 256], found I8 [128, 256]");
}

TEST(WeightSpec, WrongShape) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  testing::EditShard(dir.File(kShard2), [](std::vector<OwnedTensor>& ts) {
    for (auto& t : ts) {
      if (t.name == "layers.3.attn.compressor.ape") t.shape = {64, 256};
    }
  });
  EXPECT_EQ(ValidateError(dir.path()), dir.File(kShard2) +
                                           ": tensor 'layers.3.attn.compressor.ape': expected F32 "
                                           "[128, 128], found F32 [64, 256]");
}

TEST(WeightSpec, MissingAndUnexpectedTensors) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  testing::EditShard(dir.File(kShard2), [](std::vector<OwnedTensor>& ts) {
    for (auto& t : ts) {
      if (t.name == "layers.4.ffn.gate.bias") t.name = "layers.4.ffn.gate.bias2";
    }
  });
  testing::EditIndex(dir.path(), [](json& j) {
    j["weight_map"].erase("layers.4.ffn.gate.bias");
    j["weight_map"]["layers.4.ffn.gate.bias2"] = kShard2;
  });
  EXPECT_EQ(ValidateError(dir.path()), dir.path() +
                                           ": tensor 'layers.4.ffn.gate.bias' (F32 [8]) is "
                                           "missing from the checkpoint");
  testing::EditShard(dir.File(kShard2), [](std::vector<OwnedTensor>& ts) {
    for (const auto& t : ts) {
      if (t.name != "layers.4.ffn.gate.bias2") continue;
      OwnedTensor restored = t;
      restored.name = "layers.4.ffn.gate.bias";
      ts.push_back(restored);
      break;
    }
  });
  testing::EditIndex(dir.path(),
                     [](json& j) { j["weight_map"]["layers.4.ffn.gate.bias"] = kShard2; });
  EXPECT_EQ(ValidateError(dir.path()),
            dir.File(kShard2) +
                ": unexpected tensor 'layers.4.ffn.gate.bias2' (not in the "
                "DeepSeek-V4 layout of " +
                dir.path() + "/config.json)");
}

void SetTid2Eid(const std::string& shard, int64_t row, int64_t col, int64_t value) {
  testing::EditShard(shard, [&](std::vector<OwnedTensor>& ts) {
    for (auto& t : ts) {
      if (t.name != "layers.1.ffn.gate.tid2eid") continue;
      std::memcpy(t.bytes.data() + (row * t.shape[1] + col) * 8, &value, 8);
    }
  });
}

TEST(WeightSpec, Tid2EidRowsMustBeDistinctAndInRange) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  SetTid2Eid(dir.File(kShard1), 17, 1, 8);
  EXPECT_EQ(ValidateError(dir.path()),
            dir.File(kShard1) +
                ": tensor 'layers.1.ffn.gate.tid2eid': row 17 holds expert id 8, outside [0, 8)");
  SetTid2Eid(dir.File(kShard1), 17, 1, -1);
  EXPECT_THAT(ValidateError(dir.path()), HasSubstr("row 17 holds expert id -1"));
  // Make row 5 name the same expert twice.
  auto rows = testing::ReadAllTensors(dir.File(kShard1));
  int64_t first = -1;
  for (const auto& t : rows) {
    if (t.name == "layers.1.ffn.gate.tid2eid") std::memcpy(&first, t.bytes.data() + 5 * 16, 8);
  }
  SetTid2Eid(dir.File(kShard1), 17, 1, 0);
  SetTid2Eid(dir.File(kShard1), 17, 0, 1);
  SetTid2Eid(dir.File(kShard1), 5, 1, first);
  EXPECT_EQ(ValidateError(dir.path()),
            dir.File(kShard1) + ": tensor 'layers.1.ffn.gate.tid2eid': row 5 names expert " +
                std::to_string(first) + " twice");
}

// A W8A8 checkpoint of tiny-a's shapes (zero payload, valid tid2eid rows)
// with every INT8 scale under `naming`; `shape_of` picks each scale's shape
// from its [out].
void WriteW8a8(const std::string& dir, const checkpoint::ModelConfig& cfg,
               const std::string& naming, const std::function<Shape(int64_t)>& shape_of) {
  std::vector<OwnedTensor> ts;
  for (const checkpoint::WeightSpec& s : checkpoint::ExpectedWeights(cfg)) {
    OwnedTensor t{s.name, s.dtype, s.shape, {}};
    if (s.kind == checkpoint::WeightSpec::kInt8Scale) {
      t.name = s.name.substr(0, s.name.size() - 6) + naming;
      t.shape = shape_of(s.shape[0]);
    }
    t.bytes.assign(static_cast<size_t>(NumElements(t.shape)) * DTypeSize(t.dtype), 0);
    if (s.kind == checkpoint::WeightSpec::kI64) {
      for (int64_t r = 0; r < s.shape[0]; ++r) {
        for (int64_t c = 0; c < s.shape[1]; ++c) {
          const int64_t id = c;
          std::memcpy(t.bytes.data() + (r * s.shape[1] + c) * 8, &id, 8);
        }
      }
    }
    ts.push_back(std::move(t));
  }
  testing::WriteAllTensors(dir + "/model.safetensors", ts);
}

// ValidateCheckpoint accepts the compressed-tensors scale naming the loader
// accepts ("<module>.weight_scale" F32 [out] or [out, 1]) and checks its shape.
TEST(WeightSpec, W8a8AcceptsWeightScaleNaming) {
  checkpoint::ModelConfig cfg = TinyA();
  cfg.quantization = checkpoint::QuantizationConfig{};
  cfg.quantization.quant_method = "compressed-tensors";
  for (const char* naming : {".scale", ".weight_scale"}) {
    SCOPED_TRACE(naming);
    TempDir dir;
    WriteW8a8(dir.path(), cfg, naming, [](int64_t out) { return Shape{out, 1}; });
    auto ckpt = checkpoint::Checkpoint::Open(dir.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    const Status s = checkpoint::ValidateCheckpoint(**ckpt, cfg);
    if (std::string(naming) == ".weight_scale") {
      EXPECT_TRUE(s.ok()) << s.ToString();
    } else {  // ".scale" is dsv4's own naming and stays [out] only
      EXPECT_THAT(s.message(), HasSubstr("expected F32 [512], found F32 [512, 1]"));
    }
  }
  TempDir dir;
  WriteW8a8(dir.path(), cfg, ".weight_scale", [](int64_t out) { return Shape{out, 2}; });
  auto ckpt = checkpoint::Checkpoint::Open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_THAT(checkpoint::ValidateCheckpoint(**ckpt, cfg).message(),
              HasSubstr("tensor 'layers.0.attn.wq_b.weight_scale': expected F32 [512] (or [512, "
                        "1]), found F32 [512, 2]"));
}

}  // namespace
}  // namespace dsv4
