// `dsv4 convert` end to end on the golden tiny-a checkpoint: output layout and
// values, config and index, dry run, every validation error, resume with the
// marker (changed index/shard rejected, moved source accepted), and a real
// `dsv4 convert` process killed mid-shard then resumed, byte-identical to an
// uninterrupted run.
#include "tools/convert.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/mapped_file.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_config.h"
#include "checkpoint/safetensors_writer.h"
#include "checkpoint/weight_spec.h"
#include "tensor/numeric.h"
#include "tools/convert_numerics.h"

extern char** environ;

namespace dsv4::tools {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const char kTinyA[] = DSV4_TEST_DATA_DIR "/golden/tiny-a";
const char kDsv4[] = DSV4_BINARY_DIR "/apps/dsv4/dsv4";
const char kShard1[] = "model-00001-of-00003.safetensors";
const char kShard2[] = "model-00002-of-00003.safetensors";

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

std::string ReadAll(const std::string& path) {
  Result<std::string> r = ReadFileToString(path);
  return r.ok() ? *r : "<unreadable " + path + ">";
}

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A writable copy of tiny-a's checkpoint files (not its golden data).
void CopySource(const std::string& dst) {
  fs::create_directories(dst);
  for (const char* f : {"config.json", "model.safetensors.index.json", kShard1, kShard2,
                        "model-00003-of-00003.safetensors"}) {
    fs::copy_file(fs::path(kTinyA) / f, fs::path(dst) / f);
  }
  WriteAll(dst + "/tokenizer_config.json", "{\"x\": 1}\n");
}

Result<ConvertSummary> Convert(const std::string& in, const std::string& out, bool resume = false,
                               bool dry_run = false, std::vector<std::string>* lines = nullptr) {
  ConvertOptions o;
  o.input_dir = in;
  o.output_dir = out;
  o.resume = resume;
  o.dry_run = dry_run;
  if (lines != nullptr) o.log = [lines](const std::string& l) { lines->push_back(l); };
  return ConvertToW8a8(o);
}

std::string ErrorOf(const std::string& in, const std::string& out, bool resume = false) {
  Result<ConvertSummary> r = Convert(in, out, resume);
  return r.ok() ? "<ok>" : r.status().message();
}

TEST(Convert, TinyAConvertsToTheW8a8Layout) {
  TempDir tmp("convert-layout");
  std::vector<std::string> lines;
  Result<ConvertSummary> r = Convert(kTinyA, tmp.sub("out"), false, false, &lines);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->num_shards, 3);
  EXPECT_EQ(r->shards_converted, 3);
  EXPECT_EQ(lines.front(), "[01/03] convert: " + std::string(kShard1));
  EXPECT_EQ(lines.back(), "Conversion complete: " + tmp.sub("out"));

  // The output validates against the loader's W8A8 layout (weight_spec.h).
  Result<checkpoint::ModelConfig> cfg = checkpoint::LoadModelConfig(tmp.sub("out"));
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_TRUE(cfg->quantization.is_w8a8());
  Result<std::unique_ptr<checkpoint::Checkpoint>> ck = checkpoint::Checkpoint::Open(tmp.sub("out"));
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  Status valid = checkpoint::ValidateCheckpoint(**ck, *cfg);
  ASSERT_TRUE(valid.ok()) << valid.ToString();
  int64_t int8 = 0, bf16_fallback = 0;
  for (const checkpoint::WeightSpec& s : checkpoint::ExpectedWeights(*cfg)) {
    int8 += s.kind == checkpoint::WeightSpec::kInt8Weight;
  }
  Result<checkpoint::ModelConfig> src_cfg = checkpoint::LoadModelConfig(kTinyA);
  ASSERT_TRUE(src_cfg.ok());
  for (const checkpoint::WeightSpec& s : checkpoint::ExpectedWeights(*src_cfg)) {
    if (s.kind != checkpoint::WeightSpec::kFp8Weight) continue;
    const std::string module = s.name.substr(0, s.name.size() - 7);
    bf16_fallback += !IsInt8Module(module, src_cfg->compress_ratios, src_cfg->num_hidden_layers);
  }
  EXPECT_EQ(r->num_int8, int8);
  EXPECT_EQ(r->num_bf16, bf16_fallback);

  // Config: compressed-tensors block and ignore list; other fields kept.
  const Json c = Json::parse(ReadAll(tmp.sub("out/config.json")));
  const Json& q = c["quantization_config"];
  EXPECT_EQ(q["quant_method"], "compressed-tensors");
  EXPECT_EQ(q["format"], "int-quantized");
  EXPECT_EQ(q["quantization_status"], "compressed");
  EXPECT_TRUE(q["kv_cache_scheme"].is_null());
  EXPECT_EQ(q["li_cache_scheme"], Json({{"type", "int"}, {"num_bits", 8}}));
  EXPECT_EQ(q["config_groups"]["group_0"]["weights"]["strategy"], "channel");
  EXPECT_EQ(q["config_groups"]["group_0"]["input_activations"]["strategy"], "token");
  EXPECT_EQ(q["config_groups"]["group_0"]["input_activations"]["dynamic"], true);
  const Json& ig = q["ignore"];
  auto ignored = [&](const std::string& m) {
    return std::find(ig.begin(), ig.end(), m) != ig.end();
  };
  EXPECT_TRUE(ignored("layers.0.attn.wq_a"));
  EXPECT_TRUE(ignored("layers.2.attn.indexer.weights_proj"));  // ratio 4
  EXPECT_TRUE(ignored("layers.3.attn.compressor.wkv"));        // ratio 128
  EXPECT_FALSE(ignored("layers.3.attn.indexer.weights_proj"));
  EXPECT_TRUE(ignored("mtp.0.attn.wo_a"));
  EXPECT_TRUE(ignored("mtp.0.head"));
  EXPECT_TRUE(ignored("head"));
  EXPECT_FALSE(ignored("layers.0.attn.wq_b"));
  EXPECT_EQ(c["hidden_size"], 256);

  // Index: total_size is the sum of the output headers' payload bytes.
  const Json idx = Json::parse(ReadAll(tmp.sub("out/model.safetensors.index.json")));
  uint64_t payload = 0;
  for (const auto& shard : (*ck)->shards()) {
    for (const checkpoint::SafetensorsEntry& e : shard->header().entries)
      payload += e.end - e.begin;
  }
  EXPECT_EQ(idx["metadata"]["total_size"].get<uint64_t>(), payload);
  EXPECT_EQ(r->total_size, payload);
  EXPECT_EQ(idx["weight_map"]["layers.0.attn.wq_b.scale"],
            idx["weight_map"]["layers.0.attn.wq_b.weight"]);
  EXPECT_EQ(idx["weight_map"].count("layers.0.attn.wq_a.scale"), 0u);
  const Json marker = Json::parse(ReadAll(tmp.sub("out/" + std::string(kConvertMarkerName))));
  EXPECT_EQ(marker["complete"], true);
  EXPECT_EQ(marker["source_shards"].size(), 3u);
}

TEST(Convert, ValuesFollowTheRecipe) {
  TempDir tmp("convert-values");
  ASSERT_TRUE(Convert(kTinyA, tmp.sub("out")).ok());
  Result<std::unique_ptr<checkpoint::Checkpoint>> src = checkpoint::Checkpoint::Open(kTinyA);
  Result<std::unique_ptr<checkpoint::Checkpoint>> out =
      checkpoint::Checkpoint::Open(tmp.sub("out"));
  ASSERT_TRUE(src.ok() && out.ok());
  // FP8 -> INT8 (wq_b [512, 128]).
  {
    const TensorView* w = (*src)->Find("layers.2.attn.wq_b.weight");
    const TensorView* s = (*src)->Find("layers.2.attn.wq_b.scale");
    const TensorView* q = (*out)->Find("layers.2.attn.wq_b.weight");
    const TensorView* qs = (*out)->Find("layers.2.attn.wq_b.scale");
    ASSERT_TRUE(w && s && q && qs);
    const int64_t rows = w->dim(0), cols = w->dim(1);
    std::vector<float> f(static_cast<size_t>(rows * cols));
    DequantFp8Rows(static_cast<const uint8_t*>(w->data), static_cast<const uint8_t*>(s->data), cols,
                   0, rows, f.data());
    std::vector<int8_t> want(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      const float scale = QuantizeRowInt8(f.data() + r * cols, cols, want.data());
      float got_scale;
      std::memcpy(&got_scale, static_cast<const char*>(qs->data) + 4 * r, 4);
      ASSERT_EQ(got_scale, scale) << r;
      ASSERT_EQ(std::memcmp(static_cast<const int8_t*>(q->data) + r * cols, want.data(),
                            static_cast<size_t>(cols)),
                0)
          << r;
    }
  }
  // MXFP4 expert -> INT8, unpacked: every weight within half a step of the source.
  {
    const TensorView* w = (*src)->Find("layers.1.ffn.experts.5.w2.weight");
    const TensorView* s = (*src)->Find("layers.1.ffn.experts.5.w2.scale");
    const TensorView* q = (*out)->Find("layers.1.ffn.experts.5.w2.weight");
    const TensorView* qs = (*out)->Find("layers.1.ffn.experts.5.w2.scale");
    ASSERT_TRUE(w && s && q && qs);
    EXPECT_EQ(q->shape, (Shape{w->dim(0), 2 * w->dim(1)}));
    const int64_t rows = q->dim(0), cols = q->dim(1);
    std::vector<float> f(static_cast<size_t>(rows * cols));
    DequantFp4Rows(static_cast<const uint8_t*>(w->data), static_cast<const uint8_t*>(s->data), cols,
                   rows, f.data());
    for (int64_t r = 0; r < rows; ++r) {
      float sc;
      std::memcpy(&sc, static_cast<const char*>(qs->data) + 4 * r, 4);
      for (int64_t i = 0; i < cols; ++i) {
        const float back = static_cast<const int8_t*>(q->data)[r * cols + i] * sc;
        ASSERT_LE(std::fabs(back - f[r * cols + i]), sc * 0.5001f) << r << "," << i;
      }
    }
  }
  // FP8 -> BF16 fallback (wq_a) and a copied tensor (attn_sink).
  {
    const TensorView* w = (*src)->Find("layers.0.attn.wq_a.weight");
    const TensorView* s = (*src)->Find("layers.0.attn.wq_a.scale");
    const TensorView* b = (*out)->Find("layers.0.attn.wq_a.weight");
    ASSERT_TRUE(w && s && b);
    ASSERT_EQ(b->dtype, DType::kBF16);
    const int64_t rows = w->dim(0), cols = w->dim(1);
    std::vector<float> f(static_cast<size_t>(rows * cols));
    DequantFp8Rows(static_cast<const uint8_t*>(w->data), static_cast<const uint8_t*>(s->data), cols,
                   0, rows, f.data());
    for (int64_t i = 0; i < rows * cols; ++i) {
      bf16 got;
      std::memcpy(&got, static_cast<const char*>(b->data) + 2 * i, 2);
      ASSERT_EQ(got.bits, F32ToBf16(f[static_cast<size_t>(i)]).bits) << i;
    }
    const TensorView* a = (*src)->Find("layers.0.attn.attn_sink");
    const TensorView* a2 = (*out)->Find("layers.0.attn.attn_sink");
    ASSERT_TRUE(a && a2);
    EXPECT_EQ(std::memcmp(a->data, a2->data, a->nbytes()), 0);
  }
}

TEST(Convert, ThreadsDoNotChangeTheBytes) {
  TempDir tmp("convert-threads");
  ASSERT_TRUE(Convert(kTinyA, tmp.sub("one")).ok());
  ConvertOptions o;
  o.input_dir = kTinyA;
  o.output_dir = tmp.sub("three");
  o.num_threads = 3;
  Result<ConvertSummary> r = ConvertToW8a8(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->shards_converted, 3);
  for (const char* f : {"config.json", "model.safetensors.index.json", kShard1, kShard2,
                        "model-00003-of-00003.safetensors", kConvertMarkerName}) {
    SCOPED_TRACE(f);
    // The marker too: its records are written in shard-name order.
    const std::string a = ReadAll(tmp.sub("one/") + f);
    const std::string b = ReadAll(tmp.sub("three/") + f);
    EXPECT_TRUE(a == b);
  }
}

TEST(Convert, DryRunPrintsThePlanAndWritesNothing) {
  TempDir tmp("convert-dry");
  std::vector<std::string> lines;
  Result<ConvertSummary> r = Convert(kTinyA, tmp.sub("out"), false, true, &lines);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(fs::exists(tmp.sub("out")));
  ASSERT_GE(lines.size(), 5u);
  EXPECT_EQ(lines[0], "Input: " + std::string(kTinyA));
  EXPECT_EQ(lines[1], "Output: " + tmp.sub("out"));
  EXPECT_EQ(lines[2], "Shards: 3");
  EXPECT_EQ(lines[3], "Serving INT8 weights: " + std::to_string(r->num_int8));
  EXPECT_EQ(lines[4], "BF16 fallback weights: " + std::to_string(r->num_bf16));
  EXPECT_GT(r->num_int8, 0);
  EXPECT_GT(r->num_bf16, 0);
  // Into an existing directory: still nothing written.
  fs::create_directories(tmp.sub("existing"));
  ASSERT_TRUE(Convert(kTinyA, tmp.sub("existing"), false, true).ok());
  EXPECT_TRUE(fs::is_empty(tmp.sub("existing")));
  // The source is still validated.
  CopySource(tmp.sub("bad"));
  WriteAll(tmp.sub("bad/config.json"), "{\"model_type\": \"llama\"}");
  EXPECT_FALSE(Convert(tmp.sub("bad"), tmp.sub("out"), false, true).ok());
  EXPECT_FALSE(fs::exists(tmp.sub("out")));
}

// Rewrites one JSON file of a source copy.
void EditJson(const std::string& path, const std::function<void(Json&)>& edit) {
  Json j = Json::parse(ReadAll(path));
  edit(j);
  WriteAll(path, j.dump(2));
}

TEST(Convert, EveryValidationErrorHasItsMessage) {
  TempDir tmp("convert-errors");
  const std::string src = tmp.sub("src");
  const std::string out = tmp.sub("out");
  struct Case {
    const char* what;
    std::function<void()> mutate;
    const char* message;
  };
  const std::string idx = src + "/model.safetensors.index.json";
  const std::string cfg = src + "/config.json";
  const std::vector<Case> cases = {
      {"model type",
       [&] {
         EditJson(cfg, [](Json& j) {
           j["model_type"] = "llama";
           j["architectures"] = {"LlamaForCausalLM"};
         });
       },
       "not a DeepSeek-V4 config"},
      {"quant method",
       [&] {
         EditJson(cfg,
                  [](Json& j) { j["quantization_config"]["quant_method"] = "compressed-tensors"; });
       },
       "quantization_config.quant_method must be \"fp8\""},
      {"layers", [&] { EditJson(cfg, [](Json& j) { j["num_hidden_layers"] = -1; }); },
       "num_hidden_layers"},
      {"ratios", [&] { EditJson(cfg, [](Json& j) { j["compress_ratios"][2] = 8; }); },
       "compress_ratios"},
      {"experts", [&] { EditJson(cfg, [](Json& j) { j["n_routed_experts"] = 0; }); },
       "n_routed_experts"},
      {"no index", [&] { fs::remove(idx); }, "model.safetensors.index.json: missing"},
      {"empty map", [&] { EditJson(idx, [](Json& j) { j["weight_map"] = Json::object(); }); },
       "weight_map"},
      {"absolute shard",
       [&] { EditJson(idx, [](Json& j) { j["weight_map"]["head.weight"] = "/etc/passwd"; }); },
       "/etc/passwd"},
      {"dotdot shard",
       [&] { EditJson(idx, [](Json& j) { j["weight_map"]["head.weight"] = "../x.safetensors"; }); },
       "../x.safetensors"},
      {"subdir shard",
       [&] { EditJson(idx, [](Json& j) { j["weight_map"]["head.weight"] = "a/b.safetensors"; }); },
       "a/b.safetensors"},
      {"missing shard", [&] { fs::remove(src + "/" + kShard2); }, "is listed but does not exist"},
      {"tensor not in index",
       [&] { EditJson(idx, [](Json& j) { j["weight_map"].erase("layers.0.attn.attn_sink"); }); },
       "tensor 'layers.0.attn.attn_sink' is in the file but the index does not list it there"},
      {"index lists absent tensor",
       [&] { EditJson(idx, [](Json& j) { j["weight_map"]["layers.0.extra"] = kShard1; }); },
       "the index lists tensor 'layers.0.extra'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(src);
    CopySource(src);
    c.mutate();
    const std::string msg = ErrorOf(src, out);
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(out)) << "failed validation wrote output";
  }
}

// Header-level errors need a shard rewritten with a different tensor set.
TEST(Convert, HeaderDtypeShapeAndScaleErrors) {
  TempDir tmp("convert-header");
  const std::string src = tmp.sub("src");
  Result<std::unique_ptr<checkpoint::Checkpoint>> tiny = checkpoint::Checkpoint::Open(kTinyA);
  ASSERT_TRUE(tiny.ok());
  // Rewrites shard 1 (layers 0-2) with `edit` applied to its tensor list (data zero-filled).
  auto rewrite = [&](const std::function<void(std::vector<checkpoint::SafetensorsTensorData>&,
                                              std::vector<std::vector<uint8_t>>&)>& edit) {
    fs::remove_all(src);
    CopySource(src);
    Result<std::unique_ptr<checkpoint::SafetensorsFile>> f =
        checkpoint::SafetensorsFile::Open(src + "/" + kShard1);
    ASSERT_TRUE(f.ok());
    std::vector<checkpoint::SafetensorsTensorData> ts;
    std::vector<std::vector<uint8_t>> store;
    for (const checkpoint::SafetensorsEntry& e : (*f)->header().entries) {
      const TensorView* v = (*f)->Find(e.name);
      store.emplace_back(static_cast<const uint8_t*>(v->data),
                         static_cast<const uint8_t*>(v->data) + v->nbytes());
      ts.push_back({e.name, e.dtype, e.shape, nullptr});
    }
    edit(ts, store);
    for (size_t i = 0; i < ts.size(); ++i) {
      store[i].resize(static_cast<size_t>(NumElements(ts[i].shape)) * DTypeSize(ts[i].dtype));
      ts[i].data = store[i].data();
    }
    f->reset();
    fs::remove(src + "/" + kShard1);
    ASSERT_TRUE(checkpoint::WriteSafetensorsFile(src + "/" + kShard1, ts).ok());
  };
  auto find = [](std::vector<checkpoint::SafetensorsTensorData>& ts,
                 const std::string& name) -> size_t {
    for (size_t i = 0; i < ts.size(); ++i)
      if (ts[i].name == name) return i;
    ADD_FAILURE() << name;
    return 0;
  };
  // Wrong scale shape (E8M0 [4, 1] expected).
  rewrite([&](auto& ts, auto&) { ts[find(ts, "layers.2.attn.wq_b.scale")].shape = {4, 2}; });
  EXPECT_NE(ErrorOf(src, tmp.sub("o"))
                .find("tensor 'layers.2.attn.wq_b.scale': expected "
                      "F8_E8M0 [4, 1], found F8_E8M0 [4, 2]"),
            std::string::npos)
      << ErrorOf(src, tmp.sub("o"));
  // Scale of the wrong dtype.
  rewrite([&](auto& ts, auto&) { ts[find(ts, "layers.2.attn.wq_b.scale")].dtype = DType::kF32; });
  EXPECT_NE(ErrorOf(src, tmp.sub("o")).find("expected F8_E8M0 [4, 1], found F32 [4, 1]"),
            std::string::npos);
  // Weight dtype.
  rewrite([&](auto& ts, auto&) { ts[find(ts, "layers.2.attn.wkv.weight")].dtype = DType::kBF16; });
  EXPECT_NE(ErrorOf(src, tmp.sub("o")).find("tensor 'layers.2.attn.wkv.weight': expected F8_E4M3"),
            std::string::npos);
  // An INT8-bound weight without its scale (index updated to match).
  rewrite([&](auto& ts, auto& st) {
    const size_t i = find(ts, "layers.2.attn.wq_b.scale");
    ts.erase(ts.begin() + static_cast<long>(i));
    st.erase(st.begin() + static_cast<long>(i));
  });
  EditJson(src + "/model.safetensors.index.json",
           [](Json& j) { j["weight_map"].erase("layers.2.attn.wq_b.scale"); });
  EXPECT_NE(ErrorOf(src, tmp.sub("o"))
                .find("weight 'layers.2.attn.wq_b.weight' is converted to "
                      "INT8 but has no 'layers.2.attn.wq_b.scale'"),
            std::string::npos)
      << ErrorOf(src, tmp.sub("o"));
  // An unexpected tensor (in shard and index).
  rewrite([&](auto& ts, auto& st) {
    ts.push_back({"layers.2.attn.bogus", DType::kF32, {2}, nullptr});
    st.emplace_back();
  });
  EditJson(src + "/model.safetensors.index.json",
           [](Json& j) { j["weight_map"]["layers.2.attn.bogus"] = kShard1; });
  EXPECT_NE(ErrorOf(src, tmp.sub("o")).find("unexpected tensor 'layers.2.attn.bogus'"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(tmp.sub("o")));
}

TEST(Convert, OutputDirectoryRules) {
  TempDir tmp("convert-dirs");
  CopySource(tmp.sub("src"));
  EXPECT_NE(ErrorOf(tmp.sub("src"), tmp.sub("src")).find("--output must differ from --input-dir"),
            std::string::npos);
  EXPECT_NE(ErrorOf(tmp.sub("src"), tmp.sub("src") + "/.").find("must differ"), std::string::npos);
  fs::create_directories(tmp.sub("full"));
  WriteAll(tmp.sub("full/x"), "x");
  EXPECT_NE(ErrorOf(tmp.sub("src"), tmp.sub("full")).find("exists and is not empty; pass --resume"),
            std::string::npos);
  EXPECT_NE(ErrorOf(tmp.sub("src"), tmp.sub("full"), true).find("no conversion marker"),
            std::string::npos);
  // An empty existing directory is fine.
  fs::create_directories(tmp.sub("empty"));
  EXPECT_EQ(ErrorOf(tmp.sub("src"), tmp.sub("empty")), "<ok>");
  EXPECT_TRUE(fs::exists(tmp.sub("empty/tokenizer_config.json")));  // auxiliary file copied
}

TEST(Convert, ResumeChecksTheMarker) {
  TempDir tmp("convert-resume");
  const std::string src = tmp.sub("src");
  const std::string out = tmp.sub("out");
  CopySource(src);
  ASSERT_TRUE(Convert(src, out).ok());
  const std::string shard1 = ReadAll(out + "/" + kShard1);
  // Finished output, unchanged source: everything is kept, nothing re-hashed.
  Result<ConvertSummary> r = Convert(src, out, true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->shards_resumed, 3);
  EXPECT_EQ(r->shards_converted, 0);
  EXPECT_EQ(r->source_shards_hashed, 0);
  // Moved source directory: accepted (mtime kept by rename, no re-hash).
  fs::rename(src, tmp.sub("moved"));
  r = Convert(tmp.sub("moved"), out, true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source_shards_hashed, 0);
  // Copied source (new mtimes, same bytes): re-hashed once per shard, accepted.
  fs::copy(tmp.sub("moved"), src);
  r = Convert(src, out, true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->source_shards_hashed, 3);
  // Changed index (same mapping, different bytes).
  const std::string idx = ReadAll(src + "/model.safetensors.index.json");
  WriteAll(src + "/model.safetensors.index.json", idx + " ");
  EXPECT_NE(ErrorOf(src, out, true).find("source_index_sha256 differs"), std::string::npos);
  WriteAll(src + "/model.safetensors.index.json", idx);
  // Changed config.
  const std::string cfg = ReadAll(src + "/config.json");
  WriteAll(src + "/config.json", cfg + "\n");
  EXPECT_NE(ErrorOf(src, out, true).find("source_config_sha256 differs"), std::string::npos);
  WriteAll(src + "/config.json", cfg);
  // Changed shard bytes (same size, same header).
  std::string bytes = ReadAll(src + "/" + kShard1);
  bytes[bytes.size() - 1] ^= 1;
  WriteAll(src + "/" + kShard1, bytes);
  EXPECT_NE(ErrorOf(src, out, true).find("source shard changed since it was converted"),
            std::string::npos);
  // Nothing was overwritten by the failed attempts.
  EXPECT_EQ(ReadAll(out + "/" + kShard1), shard1);
}

TEST(Convert, ResumeRejectsAForeignShard) {
  TempDir tmp("convert-foreign");
  const std::string out = tmp.sub("out");
  ASSERT_TRUE(Convert(kTinyA, out).ok());
  fs::remove(out + "/" + kShard2);
  fs::copy_file(out + "/" + kShard1, out + "/" + kShard2);
  EXPECT_NE(ErrorOf(kTinyA, out, true).find("refusing to overwrite it"), std::string::npos);
}

// A marker is a file a user can edit or damage: every field of the wrong
// type (nlohmann's get<>() would throw, and an uncaught throw aborts) and
// every record naming a file outside the source's shards is one line.
TEST(Convert, ResumeRejectsAWrongTypedMarker) {
  TempDir tmp("convert-marker-types");
  const std::string out = tmp.sub("out");
  ASSERT_TRUE(Convert(kTinyA, out).ok());
  const std::string marker_path = out + "/" + kConvertMarkerName;
  const std::string good = ReadAll(marker_path);
  const std::vector<std::pair<std::function<void(Json&)>, std::string>> cases = {
      {[](Json& j) { j["format"] = 1; }, "field 'format' must be a string"},
      {[](Json& j) { j.erase("format"); }, "field 'format' is missing"},
      {[](Json& j) { j["source_config_sha256"] = nullptr; },
       "field 'source_config_sha256' must be a string"},
      {[](Json& j) { j["input_dir"] = 7; }, "field 'input_dir' must be a string"},
      {[](Json& j) { j["complete"] = "yes"; }, "field 'complete' must be true or false"},
      {[](Json& j) { j["source_shards"] = "all"; }, "field 'source_shards' must be an object"},
      {[](Json& j) { j["source_shards"][kShard1] = 3; },
       std::string("field 'source_shards.") + kShard1 + "' must be an object"},
      {[](Json& j) { j["source_shards"][kShard1]["size"] = "12"; },
       ".size' must be a non-negative integer"},
      {[](Json& j) { j["source_shards"][kShard1]["size"] = -1; },
       ".size' must be a non-negative integer"},
      {[](Json& j) { j["source_shards"][kShard1]["mtime_ns"] = 1.5; },
       ".mtime_ns' must be an integer"},
      {[](Json& j) { j["source_shards"][kShard1]["sha256"] = 5; },
       ".sha256' must be 64 lowercase hex digits"},
      {[](Json& j) { j["source_shards"][kShard1]["output_data_xxh3"] = 7; },
       ".output_data_xxh3' must be 16 lowercase hex digits"},
      {[](Json& j) { j["source_shards"]["../../etc/passwd"] = j["source_shards"][kShard1]; },
       "names a shard the source does not have"},
      {[](Json& j) { j = Json::array(); }, "not a JSON object"},
  };
  for (const auto& [edit, want] : cases) {
    SCOPED_TRACE(want);
    Json j = Json::parse(good);
    edit(j);
    WriteAll(marker_path, j.dump(2));
    const std::string err = ErrorOf(kTinyA, out, true);
    EXPECT_NE(err.find(want), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos);
  }
  WriteAll(marker_path, good);
  EXPECT_EQ(ErrorOf(kTinyA, out, true), "<ok>");
}

// Output shards carry a data checksum in the marker, recorded before the
// shard is published: a kept shard altered afterwards is refused, never
// kept as is; deleting it lets --resume convert it anew.
TEST(Convert, ResumeRefusesAnOutputShardAlteredAfterItWasWritten) {
  TempDir tmp("convert-altered");
  const std::string out = tmp.sub("out");
  ASSERT_TRUE(Convert(kTinyA, out).ok());
  const Json marker = Json::parse(ReadAll(out + "/" + kConvertMarkerName));
  for (const auto& [file, rec] : marker["source_shards"].items()) {
    EXPECT_EQ(rec["output_data_xxh3"].get<std::string>().size(), 16u) << file;
  }
  const std::string original = ReadAll(out + "/" + kShard2);
  std::string bytes = original;
  bytes[bytes.size() - 3] ^= 0x40;  // same size, same header: a tensor byte
  WriteAll(out + "/" + kShard2, bytes);
  const std::string err = ErrorOf(kTinyA, out, true);
  EXPECT_NE(err.find(out + "/" + kShard2 + ": output shard changed after it was written"),
            std::string::npos)
      << err;
  EXPECT_EQ(ReadAll(out + "/" + kShard2), bytes);  // refused, not overwritten
  fs::remove(out + "/" + kShard2);
  Result<ConvertSummary> r = Convert(kTinyA, out, true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->shards_converted, 1);
  EXPECT_EQ(r->shards_resumed, 2);
  EXPECT_TRUE(ReadAll(out + "/" + kShard2) == original);
}

// A marker written before output checksums existed: the kept shards' are
// recorded (once) on resume, then checked like any other.
TEST(Convert, ResumeRecordsOutputChecksumsMissingFromAnOlderMarker) {
  TempDir tmp("convert-old-marker");
  const std::string out = tmp.sub("out");
  ASSERT_TRUE(Convert(kTinyA, out).ok());
  const std::string marker_path = out + "/" + kConvertMarkerName;
  const std::string good = ReadAll(marker_path);
  Json j = Json::parse(good);
  for (auto& [file, rec] : j["source_shards"].items()) rec.erase("output_data_xxh3");
  WriteAll(marker_path, j.dump(2) + "\n");
  std::vector<std::string> lines;
  Result<ConvertSummary> r = Convert(kTinyA, out, true, false, &lines);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                          [](const std::string& l) {
                            return l.find("recorded the output checksum") != std::string::npos;
                          }),
            3);
  EXPECT_EQ(ReadAll(marker_path), good);
}

TEST(Convert, FifoAndSymlinkLoopsAreErrors) {
  TempDir tmp("convert-fifo");
  const std::string src = tmp.sub("src");
  CopySource(src);
  fs::remove(src + "/" + kShard2);
  ASSERT_EQ(::mkfifo((src + "/" + kShard2).c_str(), 0644), 0);
  EXPECT_NE(ErrorOf(src, tmp.sub("o")).find("is a FIFO, expected a regular file"),
            std::string::npos)
      << ErrorOf(src, tmp.sub("o"));
  fs::create_symlink(tmp.sub("lb"), tmp.sub("la"));
  fs::create_symlink(tmp.sub("la"), tmp.sub("lb"));
  EXPECT_NE(ErrorOf(tmp.sub("la"), tmp.sub("o"))
                .find("--input-dir " + tmp.sub("la") + ": Too many levels of symbolic links"),
            std::string::npos);
  EXPECT_NE(ErrorOf(kTinyA, tmp.sub("la")).find("Too many levels of symbolic links"),
            std::string::npos)
      << ErrorOf(kTinyA, tmp.sub("la"));
  EXPECT_FALSE(fs::exists(tmp.sub("o")));
}

// Runs `dsv4 args...`; returns its pid (stdout/stderr to log).
pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  std::vector<std::string> storage = {kDsv4};
  storage.insert(storage.end(), args.begin(), args.end());
  for (std::string& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, kDsv4, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

int WaitExit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The CLI's side of the same rules: one line and exit status 1 for a damaged
// marker (not SIGABRT), 2 for a thread count out of range.
TEST(ConvertProcess, BadMarkerAndThreadsAreOneLine) {
  ASSERT_TRUE(fs::exists(kDsv4)) << "build the dsv4 target first";
  TempDir tmp("convert-cli-errors");
  const std::string out = tmp.sub("out");
  ASSERT_TRUE(Convert(kTinyA, out).ok());
  Json j = Json::parse(ReadAll(out + "/" + kConvertMarkerName));
  j["source_shards"][kShard1]["size"] = "big";
  WriteAll(out + "/" + kConvertMarkerName, j.dump());
  EXPECT_EQ(WaitExit(Spawn({"convert", "--input-dir", kTinyA, "--output-dir", out, "--resume"},
                           tmp.sub("marker.log"))),
            2);  // a malformed marker in --output-dir is bad input (docs/deploy.md "Errors")
  const std::string log = ReadAll(tmp.sub("marker.log"));
  EXPECT_EQ(log.rfind("dsv4 convert: ", 0), 0u) << log;
  EXPECT_NE(log.find(".size' must be a non-negative integer"), std::string::npos) << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  EXPECT_EQ(WaitExit(Spawn({"convert", "--input-dir", kTinyA, "--output-dir", tmp.sub("t"),
                            "--threads", "1000000"},
                           tmp.sub("threads.log"))),
            2);
  EXPECT_EQ(ReadAll(tmp.sub("threads.log")),
            "dsv4: --threads: Value 1000000 not in range 0 to 1024\n");
}

TEST(ConvertProcess, KilledMidShardThenResumedIsByteIdentical) {
  ASSERT_TRUE(fs::exists(kDsv4)) << "build the dsv4 target first";
  TempDir tmp("convert-kill");
  const std::string ref = tmp.sub("ref");
  ASSERT_EQ(
      WaitExit(Spawn({"convert", "--input-dir", kTinyA, "--output-dir", ref}, tmp.sub("ref.log"))),
      0);
  ASSERT_TRUE(fs::exists(ref + "/config.json")) << ReadAll(tmp.sub("ref.log"));

  // Kill as soon as a shard's temp file appears; retry until the kill lands
  // mid-shard (temp file left, its final file absent).
  const std::string out = tmp.sub("out");
  bool mid_shard = false;
  std::string temp_seen;
  for (int attempt = 0; attempt < 20 && !mid_shard; ++attempt) {
    fs::remove_all(out);
    const pid_t pid =
        Spawn({"convert", "--input-dir", kTinyA, "--output-dir", out}, tmp.sub("kill.log"));
    ASSERT_GT(pid, 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline && temp_seen.empty()) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(out, ec)) {
        const std::string n = e.path().filename().string();
        if (n.ends_with(".safetensors.tmp")) temp_seen = n;
      }
    }
    ::kill(pid, SIGKILL);
    EXPECT_EQ(WaitExit(pid), 128 + SIGKILL);
    if (temp_seen.empty()) continue;
    const std::string final_name = temp_seen.substr(1, temp_seen.size() - 5);
    mid_shard = fs::exists(out + "/" + temp_seen) && !fs::exists(out + "/" + final_name);
    if (!mid_shard) temp_seen.clear();
  }
  ASSERT_TRUE(mid_shard) << "never caught the converter mid-shard";
  EXPECT_FALSE(fs::exists(out + "/config.json"));

  // Without --resume the half-finished directory is refused; with it, completed.
  EXPECT_EQ(
      WaitExit(Spawn({"convert", "--input-dir", kTinyA, "--output-dir", out}, tmp.sub("norm.log"))),
      1);
  EXPECT_NE(ReadAll(tmp.sub("norm.log")).find("dsv4 convert: "), std::string::npos);
  ASSERT_EQ(WaitExit(Spawn({"convert", "--input-dir", kTinyA, "--output-dir", out, "--resume"},
                           tmp.sub("resume.log"))),
            0)
      << ReadAll(tmp.sub("resume.log"));
  EXPECT_NE(
      ReadAll(tmp.sub("resume.log")).find("convert: " + temp_seen.substr(1, temp_seen.size() - 5)),
      std::string::npos);
  for (const char* f : {"config.json", "model.safetensors.index.json", kShard1, kShard2,
                        "model-00003-of-00003.safetensors"}) {
    SCOPED_TRACE(f);
    EXPECT_TRUE(ReadAll(ref + "/" + f) == ReadAll(out + "/" + f));
  }
  EXPECT_FALSE(fs::exists(out + "/" + temp_seen));  // the stale temp file was replaced
}

}  // namespace
}  // namespace dsv4::tools
