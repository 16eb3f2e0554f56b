// Checkpoint directory loading: the tiny-a checkpoint opens; every index/shard
// inconsistency yields a one-line error naming the file and tensor.

#include "checkpoint/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/model_config.h"
#include "checkpoint/safetensors_writer.h"
#include "checkpoint_test_util.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing::kIndex;
using testing::kShard1;
using testing::kShard2;
using testing::kShard3;
using testing::OwnedTensor;
using testing::TempDir;

std::string OpenError(const std::string& dir) {
  auto r = checkpoint::Checkpoint::Open(dir);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  return r.status().message();
}

std::string IndexError(const std::string& text) {
  auto r = checkpoint::ParseCheckpointIndex(text, "idx.json");
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_THAT(r.status().message(), ::testing::StartsWith("idx.json: "));
  return r.status().message();
}

TEST(Checkpoint, OpensTinyA) {
  auto r = checkpoint::Checkpoint::Open(testing::TinyADir());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const checkpoint::Checkpoint& c = **r;
  EXPECT_EQ(c.Names().size(), 585u);
  EXPECT_EQ(c.shards().size(), 3u);
  EXPECT_EQ(c.FileOf("embed.weight"), testing::TinyADir() + "/" + kShard1);
  EXPECT_EQ(c.FileOf("head.weight"), testing::TinyADir() + "/" + kShard2);
  EXPECT_EQ(c.FileOf("mtp.0.e_proj.weight"), testing::TinyADir() + "/" + kShard3);
  EXPECT_EQ(c.FileOf("nope"), "");
  EXPECT_EQ(c.Find("nope"), nullptr);
  const TensorView* embed = c.Find("embed.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->shape, (Shape{1024, 256}));
  auto ok = c.Require("layers.0.attn.wq_a.weight", DType::kF8E4M3, {128, 256});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok, c.Find("layers.0.attn.wq_a.weight"));
}

// Dropping a tensor's resident pages keeps its bytes readable (they come
// back from the file) and drops exactly the whole pages inside it.
TEST(Checkpoint, DropResidentPagesKeepsBytesReadable) {
  auto ckpt = checkpoint::Checkpoint::Open(testing::TinyADir());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const checkpoint::Checkpoint& c = **ckpt;
  std::string largest;
  for (const std::string& name : c.Names()) {
    if (largest.empty() || c.Find(name)->nbytes() > c.Find(largest)->nbytes()) largest = name;
  }
  const TensorView& v = *c.Find(largest);
  const auto* bytes = static_cast<const uint8_t*>(v.data);
  const std::vector<uint8_t> before(bytes, bytes + v.nbytes());
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto at = reinterpret_cast<uintptr_t>(bytes);
  const uintptr_t first = (at + page - 1) / page * page, last = (at + v.nbytes()) / page * page;
  ASSERT_GT(last, first) << largest << " spans no whole page";
  // Resident pages of the process (statm's second field), the tensor just read.
  const auto resident = [] {
    std::ifstream statm("/proc/self/statm");
    int64_t size = 0, pages = 0;
    statm >> size >> pages;
    return pages;
  };
  const int64_t resident_before = resident();
  EXPECT_EQ(c.DropResidentPages(largest), static_cast<int64_t>(last - first));
  const int64_t dropped_pages = static_cast<int64_t>((last - first) / page);
  EXPECT_GE(resident_before - resident(), dropped_pages / 2) << dropped_pages;
  EXPECT_EQ(std::memcmp(bytes, before.data(), before.size()), 0);
  EXPECT_EQ(c.DropResidentPages("no.such.tensor"), 0);
}

TEST(Checkpoint, RequireMessages) {
  auto r = checkpoint::Checkpoint::Open(testing::TinyADir());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->Require("layers.0.attn.wq_a.weight", DType::kBF16, {128, 256}).status().message(),
            testing::TinyADir() + "/" + kShard1 +
                ": tensor 'layers.0.attn.wq_a.weight': expected BF16 [128, 256], found F8_E4M3 "
                "[128, 256]");
  EXPECT_THAT(
      (*r)->Require("layers.0.attn.wq_a.weight", DType::kF8E4M3, {256, 128}).status().message(),
      HasSubstr("expected F8_E4M3 [256, 128], found F8_E4M3 [128, 256]"));
  auto missing = (*r)->Require("layers.9.x", DType::kF32, {1});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("tensor 'layers.9.x' not found"));
}

TEST(CheckpointIndex, ParsesAndRejectsMalformed) {
  auto ok = checkpoint::ParseCheckpointIndex(
      R"({"metadata": {"total_size": 12}, "weight_map": {"a": "s1.safetensors", "b": "s2"}})",
      "idx.json");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(*ok->total_size, 12u);
  EXPECT_EQ(ok->weight_map.at("b"), "s2");
  EXPECT_FALSE(checkpoint::ParseCheckpointIndex(R"({"weight_map": {"a": "s"}})", "i")
                   ->total_size.has_value());

  EXPECT_THAT(IndexError("{"), HasSubstr("not valid JSON"));
  EXPECT_THAT(IndexError("[]"), HasSubstr("top-level JSON value is not an object"));
  EXPECT_THAT(IndexError(R"({"metadata": {}})"), HasSubstr("missing or non-object 'weight_map'"));
  EXPECT_THAT(IndexError(R"({"weight_map": []})"), HasSubstr("missing or non-object 'weight_map'"));
  EXPECT_THAT(IndexError(R"({"weight_map": {}})"), HasSubstr("'weight_map' is empty"));
  EXPECT_THAT(IndexError(R"({"weight_map": {"a": 3}})"),
              HasSubstr("tensor 'a': shard name is not a string"));
  EXPECT_THAT(IndexError(R"({"weight_map": {"": "s"}})"), HasSubstr("empty tensor name"));
  EXPECT_THAT(IndexError(R"({"weight_map": {"a": "s", "a": "t"}})"),
              HasSubstr("tensor 'a' is listed twice in 'weight_map'"));
  EXPECT_THAT(IndexError(R"({"metadata": 5, "weight_map": {"a": "s"}})"),
              HasSubstr("'metadata' is not an object"));
  EXPECT_THAT(IndexError(R"({"metadata": {"total_size": -1}, "weight_map": {"a": "s"}})"),
              HasSubstr("'metadata.total_size' must be a non-negative integer"));
  EXPECT_THAT(IndexError(R"({"metadata": {"total_size": "9"}, "weight_map": {"a": "s"}})"),
              HasSubstr("'metadata.total_size' must be a non-negative integer"));
}

TEST(CheckpointIndex, UnsafeShardNames) {
  for (const char* name :
       {"/etc/passwd", "../model.safetensors", "sub/x.safetensors", "", "..", ".", "a\\\\b"}) {
    const std::string text = json{{"weight_map", {{"t", name}}}}.dump();
    EXPECT_THAT(IndexError(text), HasSubstr("tensor 't': unsafe shard name")) << name;
  }
  EXPECT_TRUE(checkpoint::IsSafeShardName("model-00001-of-00046.safetensors"));
  EXPECT_FALSE(checkpoint::IsSafeShardName(std::string_view("a\0b", 3)));
}

TEST(Checkpoint, UnsafeShardNameInDirectory) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  testing::EditIndex(dir.path(), [](json& j) { j["weight_map"]["embed.weight"] = "../x"; });
  EXPECT_THAT(OpenError(dir.path()),
              HasSubstr(dir.File(kIndex) + ": tensor 'embed.weight': unsafe shard name '../x'"));
}

TEST(Checkpoint, MalformedIndex) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  testing::WriteText(dir.File(kIndex), "{\"weight_map\": {");
  EXPECT_EQ(OpenError(dir.path()), dir.File(kIndex) + ": not valid JSON");
}

TEST(Checkpoint, MissingShard) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  std::filesystem::remove(dir.File(kShard3));
  EXPECT_THAT(OpenError(dir.path()),
              HasSubstr(dir.File(kIndex) + ": shard '" + kShard3 + "' (listed for tensor 'mtp.0."));
}

// A FIFO in place of a shard, the index or config.json is refused at once
// (opening one for reading would block until a writer came), and a symlink
// loop is named instead of read as "absent".
TEST(Checkpoint, FifoAndSymlinkLoopAreErrorsNotHangs) {
  for (const char* victim : {kShard2, kIndex, "config.json"}) {
    SCOPED_TRACE(victim);
    TempDir dir;
    testing::CopyTinyA(dir.path());
    std::filesystem::remove(dir.File(victim));
    ASSERT_EQ(::mkfifo(dir.File(victim).c_str(), 0644), 0);
    const Status s = std::string(victim) == "config.json"
                         ? checkpoint::LoadModelConfig(dir.path()).status()
                         : checkpoint::Checkpoint::Open(dir.path()).status();
    EXPECT_EQ(s.message(), dir.File(victim) + ": is a FIFO, expected a regular file");
  }
  TempDir dir;
  testing::CopyTinyA(dir.path());
  std::filesystem::remove(dir.File(kShard1));
  std::filesystem::create_symlink(dir.File("loop"), dir.File(kShard1));
  std::filesystem::create_symlink(dir.File(kShard1), dir.File("loop"));
  EXPECT_THAT(OpenError(dir.path()), HasSubstr(dir.File(kShard1) + ": Too many levels of symbolic "
                                                                   "links (a symlink loop?)"));
  TempDir loops;
  std::filesystem::create_symlink(loops.File("b"), loops.File("a"));
  std::filesystem::create_symlink(loops.File("a"), loops.File("b"));
  EXPECT_THAT(OpenError(loops.File("a")),
              HasSubstr("checkpoint directory " + loops.File("a") + ": Too many levels"));
  EXPECT_THAT(checkpoint::LoadModelConfig(loops.File("a")).status().message(),
              HasSubstr("model directory " + loops.File("a") + ": Too many levels"));
  EXPECT_THAT(OpenError(dir.File("config.json")), HasSubstr("is not a directory"));
}

TEST(Checkpoint, IndexNamesTensorTheShardLacks) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  testing::EditIndex(dir.path(), [](json& j) { j["weight_map"]["layers.0.ghost"] = kShard1; });
  EXPECT_EQ(OpenError(dir.path()), dir.File(kShard1) + ": tensor 'layers.0.ghost' listed in " +
                                       kIndex + " is missing from the shard");
}

TEST(Checkpoint, ShardTensorNotInIndex) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  testing::EditIndex(dir.path(), [](json& j) { j["weight_map"].erase("norm.weight"); });
  EXPECT_EQ(OpenError(dir.path()),
            dir.File(kShard2) + ": tensor 'norm.weight' is not listed in " + kIndex);
}

TEST(Checkpoint, TensorListedUnderAnotherShard) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  testing::EditIndex(dir.path(), [](json& j) { j["weight_map"]["norm.weight"] = kShard1; });
  EXPECT_EQ(OpenError(dir.path()), dir.File(kShard2) + ": tensor 'norm.weight' is listed in " +
                                       kIndex + " under shard '" + kShard1 + "'");
}

TEST(Checkpoint, DuplicateAcrossShards) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  // A fourth shard that repeats norm.weight (held by shard 2) next to a new tensor.
  std::vector<OwnedTensor> extra;
  for (auto& t : testing::ReadAllTensors(dir.File(kShard2))) {
    if (t.name == "norm.weight") extra.push_back(t);
  }
  ASSERT_EQ(extra.size(), 1u);
  extra.push_back({"extra", DType::kF32, {1}, std::vector<uint8_t>(4)});
  testing::WriteAllTensors(dir.File("model-extra.safetensors"), extra);
  testing::EditIndex(dir.path(),
                     [](json& j) { j["weight_map"]["extra"] = "model-extra.safetensors"; });
  // Shards are opened in name order, so the later one reports the clash.
  EXPECT_EQ(OpenError(dir.path()), dir.File("model-extra.safetensors") +
                                       ": tensor 'norm.weight' also appears in " +
                                       dir.File(kShard2));
}

TEST(Checkpoint, TotalSizeMismatchIsOnlyAWarning) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  testing::EditIndex(dir.path(), [](json& j) { j["metadata"]["total_size"] = 1; });
  auto r = checkpoint::Checkpoint::Open(dir.path());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

TEST(Checkpoint, TinyATotalSizeMatchesPayload) {
  // The documented total_size equals the summed tensor bytes of the shards.
  auto idx =
      checkpoint::ParseCheckpointIndex(testing::ReadText(testing::TinyADir() + "/" + kIndex), "i");
  ASSERT_TRUE(idx.ok());
  auto r = checkpoint::Checkpoint::Open(testing::TinyADir());
  ASSERT_TRUE(r.ok());
  uint64_t sum = 0;
  for (const auto& s : (*r)->shards()) {
    for (const auto& e : s->header().entries) sum += e.end - e.begin;
  }
  EXPECT_EQ(*idx->total_size, sum);
  EXPECT_EQ(sum, 9723818u);
}

TEST(Checkpoint, CorruptShardNamesTheShard) {
  TempDir dir;
  testing::CopyTinyA(dir.path());
  auto bytes = testing::ReadBytes(dir.File(kShard2));
  bytes.resize(bytes.size() / 2);
  testing::WriteBytes(dir.File(kShard2), bytes);
  EXPECT_THAT(OpenError(dir.path()), HasSubstr(dir.File(kShard2) + ": tensor '"));
}

TEST(Checkpoint, SingleFileAndAmbiguousLayouts) {
  TempDir dir;
  EXPECT_THAT(OpenError(dir.path()), HasSubstr("neither model.safetensors nor"));
  testing::WriteAllTensors(dir.File("model.safetensors"),
                           {{"a", DType::kF32, {2}, std::vector<uint8_t>(8, 1)}});
  auto r = checkpoint::Checkpoint::Open(dir.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->Names(), std::vector<std::string>{"a"});
  EXPECT_EQ((*r)->FileOf("a"), dir.File("model.safetensors"));
  ASSERT_TRUE(checkpoint::WriteIndexJson(dir.path(), {{"a", "model.safetensors"}}, 8).ok());
  EXPECT_THAT(OpenError(dir.path()), HasSubstr("both model.safetensors and"));
}

TEST(Checkpoint, WriteIndexJsonRoundTrip) {
  TempDir dir;
  testing::WriteAllTensors(dir.File("s1.safetensors"),
                           {{"a", DType::kF32, {2}, std::vector<uint8_t>(8, 1)}});
  testing::WriteAllTensors(dir.File("s2.safetensors"),
                           {{"b", DType::kI64, {1}, std::vector<uint8_t>(8, 2)}});
  ASSERT_TRUE(
      checkpoint::WriteIndexJson(dir.path(), {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}, 16)
          .ok());
  auto idx = checkpoint::ParseCheckpointIndex(testing::ReadText(dir.File(kIndex)), kIndex);
  ASSERT_TRUE(idx.ok()) << idx.status().ToString();
  EXPECT_EQ(*idx->total_size, 16u);
  EXPECT_EQ(idx->weight_map.size(), 2u);
  auto r = checkpoint::Checkpoint::Open(dir.path());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->FileOf("b"), dir.File("s2.safetensors"));
  EXPECT_THAT(checkpoint::WriteIndexJson(dir.path(), {{"a", "../s1"}}, 0).message(),
              HasSubstr("tensor 'a': unsafe shard name '../s1'"));
}

}  // namespace
}  // namespace dsv4
