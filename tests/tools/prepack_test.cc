// dsv4 prepack and the sidecar loader (docs/prepack.md): the layout on disk,
// every load decision (used, missing, off, cold, stale, wrong ranks,
// mismatched names, unreadable header, truncated = error), bitwise identical
// logits with and without the sidecar on tiny-a and its W8A8 conversion, and
// the fused gate-up GEMM against the separate ones.
#include "tools/prepack.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "base/checksum.h"
#include "base/thread_pool.h"
#include "checkpoint/prepacked.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"
#include "dist/communicator.h"
#include "kernels/gemm.h"
#include "kernels/int8_gemm.h"
#include "model/model.h"
#include "testing/golden.h"
#include "tools/convert.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// A private copy of a checkpoint directory (its mtimes are ours to change).
std::string CopyCheckpoint(const std::string& from, const std::string& name) {
  const fs::path dir =
      fs::path(DSV4_BINARY_DIR) / "tmp" / (name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(from)) {
    const std::string f = e.path().filename().string();
    if (f == "config.json" || f.rfind("model", 0) == 0) fs::copy_file(e.path(), dir / f);
  }
  return dir.string();
}

std::unique_ptr<model::Model> LoadOrDie(const std::string& dir, const model::ModelOptions& o) {
  auto m = model::Model::Load(dir, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(m).value() : nullptr;
}

model::ModelOptions Policy(const std::string& prepacked, double min_residency = 0.95) {
  model::ModelOptions o;
  o.prepacked = prepacked;
  o.prepacked_min_residency = min_residency;
  return o;
}

// Main-model logits of every row of a 12-token prompt, then the MTP head's
// logits on the same rows (its input: the main streams), concatenated.
std::vector<float> Logits(const model::Model& m, ThreadPool* pool) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 12; ++i) ids.push_back((i * 131 + 7) % 1000);
  const int64_t v = m.config().vocab_size;
  model::ForwardBatch b;
  b.Add(0, 0, ids);
  for (int64_t r = 0; r < b.num_tokens(); ++r) b.logit_rows.push_back(r);
  std::vector<float> logits(2 * ids.size() * static_cast<size_t>(v));
  std::vector<bf16> streams(ids.size() * static_cast<size_t>(m.stream_width()));
  auto cache = m.NewCache(1);
  model::Workspace ws;
  model::ForwardOutputs out;
  out.logits = logits.data();
  out.streams = streams.data();
  EXPECT_TRUE(m.Forward(b, *cache, out, ws, pool).ok());
  model::ForwardOutputs mtp;
  mtp.logits = logits.data() + ids.size() * static_cast<size_t>(v);
  EXPECT_TRUE(m.ForwardMtp(b, streams.data(), *cache, mtp, ws, pool).ok());
  return logits;
}

void ExpectBitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

Result<tools::PrepackSummary> Pack(const std::string& dir, int64_t ranks = 1,
                                   const std::string& output = "", bool force = false) {
  tools::PrepackOptions o;
  o.model_dir = dir;
  o.ranks = ranks;
  o.output = output;
  o.force = force;
  return tools::Prepack(o);
}

class PrepackTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(CopyCheckpoint(testing::TestDataPath("golden/tiny-a"), "prepack"));
    pool_ = new ThreadPool(2);
    auto m = model::Model::Load(*dir_, Policy("off"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    reference_ = new std::vector<float>(Logits(**m, pool_));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete pool_;
    delete reference_;
  }
  void SetUp() override {
    sidecar_ = *dir_ + "/" + checkpoint::PrepackedFileName(1);
    fs::remove(sidecar_);
    auto r = Pack(*dir_);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  static std::string* dir_;
  static ThreadPool* pool_;
  static std::vector<float>* reference_;  // checkpoint path ("off")
  std::string sidecar_;
};

std::string* PrepackTest::dir_ = nullptr;
ThreadPool* PrepackTest::pool_ = nullptr;
std::vector<float>* PrepackTest::reference_ = nullptr;

TEST_F(PrepackTest, LayoutIsAlignedStackedAndFused) {
  auto f = checkpoint::SafetensorsFile::Open(sidecar_);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const auto& meta = (*f)->metadata();
  EXPECT_EQ(meta.at("format"), "dsv4-stacked");
  EXPECT_EQ(meta.at("layout_version"), std::to_string(checkpoint::kPrepackedLayoutVersion));
  EXPECT_EQ(meta.at("ranks"), "1");
  EXPECT_EQ(meta.at("isa_family"), "cpu-rowmajor");
  EXPECT_EQ(meta.at("fingerprint").size(), 64u);
  for (const auto& e : (*f)->header().entries) {
    if (e.name.rfind("__pad.", 0) == 0) {
      EXPECT_LT(e.end - e.begin, 64u);
    } else {
      EXPECT_EQ(((*f)->header().data_start + e.begin) % 64, 0u) << e.name;
    }
  }
  // tiny-a: 8 experts, inter 128, dim 256; one shared expert of width 128.
  const TensorView* w13 = (*f)->Find("layers.0.ffn.experts.w13.weight");
  ASSERT_NE(w13, nullptr);
  EXPECT_EQ(w13->shape, (Shape{1, 8, 256, 128}));
  EXPECT_EQ((*f)->Find("layers.0.ffn.experts.w13.scale")->shape, (Shape{1, 8, 256, 8}));
  EXPECT_EQ((*f)->Find("layers.0.ffn.experts.w2.weight")->shape, (Shape{1, 8, 256, 64}));
  EXPECT_EQ((*f)->Find("layers.0.ffn.shared_experts.w13.weight")->shape, (Shape{256, 256}));
  EXPECT_EQ((*f)->Find("layers.0.ffn.shared_experts.w13.scale")->shape, (Shape{2, 2}));
  // wo_a as stored: the kernels read FP8 directly (GemmBf16Fp8).
  EXPECT_EQ((*f)->Find("layers.0.attn.wo_a.weight")->dtype, DType::kF8E4M3);
  EXPECT_NE((*f)->Find("layers.0.attn.wo_a.scale"), nullptr);
  EXPECT_EQ((*f)->Find("layers.0.ffn.gate.tid2eid")->dtype, DType::kI32);
  EXPECT_EQ((*f)->Find("layers.0.ffn.experts.0.w1.weight"), nullptr);
  EXPECT_EQ((*f)->Find("embed.weight"), nullptr);
  EXPECT_NE((*f)->Find("mtp.0.ffn.experts.w13.weight"), nullptr);
  // The sidecar inherits the first shard's permission bits.
  struct stat a, b;
  ASSERT_EQ(::stat(sidecar_.c_str(), &a), 0);
  ASSERT_EQ(::stat((*dir_ + "/model-00001-of-00003.safetensors").c_str(), &b), 0);
  EXPECT_EQ(a.st_mode & 0777, b.st_mode & 0666);
}

TEST_F(PrepackTest, HotSidecarIsUsedAndLogitsAreBitwiseIdentical) {
  auto m = LoadOrDie(*dir_, Policy("auto"));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->prepacked().outcome, checkpoint::PrepackedOutcome::kUsed) << m->prepacked().reason;
  EXPECT_GE(m->prepacked().residency, 0.95);  // just written: in the page cache
  ASSERT_NE(m->checkpoint().overlay(), nullptr);
  ExpectBitwiseEqual(Logits(*m, pool_), *reference_);
  // An explicit path is the same file.
  auto p = LoadOrDie(*dir_, Policy(sidecar_));
  EXPECT_EQ(p->prepacked().outcome, checkpoint::PrepackedOutcome::kUsed);
}

TEST_F(PrepackTest, MissingAndOff) {
  fs::remove(sidecar_);
  auto m = LoadOrDie(*dir_, Policy("auto"));
  EXPECT_EQ(m->prepacked().outcome, checkpoint::PrepackedOutcome::kMissing);
  EXPECT_EQ(m->checkpoint().overlay(), nullptr);
  auto off = LoadOrDie(*dir_, Policy("off"));
  EXPECT_EQ(off->prepacked().outcome, checkpoint::PrepackedOutcome::kDisabled);
  auto named = model::Model::Load(*dir_, Policy(*dir_ + "/nope.safetensors"));
  ASSERT_FALSE(named.ok());
  EXPECT_NE(named.status().message().find("nope.safetensors"), std::string::npos);
}

TEST_F(PrepackTest, ColdSidecarFallsBack) {
  // Residency above 100% can never be met: the cold path, deterministically.
  auto m = LoadOrDie(*dir_, Policy("auto", 1.01));
  EXPECT_EQ(m->prepacked().outcome, checkpoint::PrepackedOutcome::kCold);
  EXPECT_NE(m->prepacked().reason.find("residency"), std::string::npos);
  EXPECT_EQ(m->checkpoint().overlay(), nullptr);
  ExpectBitwiseEqual(Logits(*m, pool_), *reference_);
}

TEST_F(PrepackTest, TouchedShardMakesItStale) {
  const std::string shard = *dir_ + "/model-00002-of-00003.safetensors";
  const auto t = fs::last_write_time(shard);
  fs::last_write_time(shard, t + std::chrono::seconds(5));
  auto m = LoadOrDie(*dir_, Policy("auto"));
  fs::last_write_time(shard, t);
  EXPECT_EQ(m->prepacked().outcome, checkpoint::PrepackedOutcome::kStale);
  EXPECT_NE(m->prepacked().reason.find("shard model-00002-of-00003.safetensors changed"),
            std::string::npos)
      << m->prepacked().reason;
  ExpectBitwiseEqual(Logits(*m, pool_), *reference_);
  // Restoring the mtime makes it current again.
  EXPECT_EQ(LoadOrDie(*dir_, Policy("auto"))->prepacked().outcome,
            checkpoint::PrepackedOutcome::kUsed);
}

TEST_F(PrepackTest, WrongRankCountIsStale) {
  auto r = Pack(*dir_, 2, sidecar_, /*force=*/true);  // a 2-rank layout at the 1-rank path
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto m = LoadOrDie(*dir_, Policy("auto"));
  EXPECT_EQ(m->prepacked().outcome, checkpoint::PrepackedOutcome::kStale);
  EXPECT_EQ(m->prepacked().reason, "built for 2 ranks, engine runs 1");
  // The engine asking for 2 ranks finds the 2-rank file (and one process
  // binds every rank's experts: still the same logits).
  model::ModelOptions two = Policy(sidecar_);
  two.ranks = 2;
  auto m2 = LoadOrDie(*dir_, two);
  EXPECT_EQ(m2->prepacked().outcome, checkpoint::PrepackedOutcome::kUsed) << m2->prepacked().reason;
  ExpectBitwiseEqual(Logits(*m2, pool_), *reference_);
}

// Rank `rank` of `size` as the model sees it at load (which experts to bind
// and map); no collective may run.
class LoadOnlyRanks final : public dist::Communicator {
 public:
  LoadOnlyRanks(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status Broadcast(void*, int64_t, int) override { return Internal("no collectives at load"); }
  Status BroadcastIdle(void*, int64_t, int, double) override { return Broadcast(nullptr, 0, 0); }
  Status AllGatherV(const void*, void*, std::span<const int64_t>) override {
    return Broadcast(nullptr, 0, 0);
  }
  Status AllToAllV(const void*, std::span<const int64_t>, void*,
                   std::span<const int64_t>) override {
    return Broadcast(nullptr, 0, 0);
  }
  Status Barrier() override { return Broadcast(nullptr, 0, 0); }
  [[noreturn]] void Abort(const std::string& message, int) override {
    ADD_FAILURE() << message;
    std::abort();
  }

 private:
  int rank_, size_;
};

// Expert parallelism maps only the rank's experts (docs/scale-out.md
// "Memory"): rank 1 of 2 binds experts [4, 8), the others' tensors leave the
// checkpoint and their pages are unmapped, from the checkpoint itself, from
// the one-process sidecar `auto` falls back to, and from a 4-rank sidecar
// named explicitly (any stacking binds).
TEST_F(PrepackTest, ExpertRankMapsOnlyItsExperts) {
  LoadOnlyRanks rank1(1, 2);
  auto whole = LoadOrDie(*dir_, Policy("off"));
  model::ModelOptions o = Policy("off");
  o.expert_parallel = &rank1;
  auto m = LoadOrDie(*dir_, o);
  ASSERT_NE(m, nullptr);
  const checkpoint::Checkpoint& c = m->checkpoint();
  EXPECT_EQ(c.Find("layers.0.ffn.experts.3.w1.weight"), nullptr);
  EXPECT_NE(c.Find("layers.0.ffn.experts.4.w1.weight"), nullptr);
  EXPECT_EQ(c.Find("mtp.0.ffn.experts.0.w2.weight"), nullptr);
  EXPECT_EQ(c.Require("layers.1.ffn.experts.0.w2.weight", DType::kI8, {256, 64}).status().code(),
            StatusCode::kNotFound);
  EXPECT_NE(c.Find("layers.0.ffn.shared_experts.w1.weight"), nullptr);
  EXPECT_EQ(2 * m->RoutedExpertBytes(), whole->RoutedExpertBytes());
  // Page rounding keeps a few edge pages; most of the other half goes.
  EXPECT_LT(m->MappedWeightBytes(), whole->MappedWeightBytes() - whole->RoutedExpertBytes() / 4);

  auto m_r1 = LoadOrDie(*dir_, [&] {
    model::ModelOptions a = Policy("auto");
    a.expert_parallel = &rank1;
    return a;
  }());
  ASSERT_NE(m_r1, nullptr);
  EXPECT_EQ(m_r1->prepacked().outcome, checkpoint::PrepackedOutcome::kUsed);
  EXPECT_EQ(m_r1->prepacked().path, sidecar_);  // no r2 file: the one-process sidecar
  ASSERT_NE(m_r1->checkpoint().overlay(), nullptr);
  EXPECT_LT(m_r1->checkpoint().overlay()->mapped_bytes(),
            m_r1->checkpoint().overlay()->file_size());
  EXPECT_EQ(2 * m_r1->RoutedExpertBytes(), LoadOrDie(*dir_, Policy("auto"))->RoutedExpertBytes());

  const std::string r4 = *dir_ + "/four-ranks.safetensors";
  ASSERT_TRUE(Pack(*dir_, 4, r4).ok());
  model::ModelOptions four = Policy(r4);
  four.expert_parallel = &rank1;
  auto m_r4 = LoadOrDie(*dir_, four);
  ASSERT_NE(m_r4, nullptr);
  EXPECT_EQ(m_r4->prepacked().outcome, checkpoint::PrepackedOutcome::kUsed)
      << m_r4->prepacked().reason;
  EXPECT_EQ(m_r4->RoutedExpertBytes(), m_r1->RoutedExpertBytes());
  EXPECT_LT(m_r4->checkpoint().overlay()->mapped_bytes(),
            m_r4->checkpoint().overlay()->file_size());
  fs::remove(r4);
}

TEST_F(PrepackTest, TruncatedSidecarIsAnError) {
  fs::resize_file(sidecar_, fs::file_size(sidecar_) - 100);
  auto m = model::Model::Load(*dir_, Policy("auto"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find(sidecar_), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("corrupt"), std::string::npos) << m.status().message();
}

// The data checksum recorded by prepack equals the one of the bytes on disk,
// and a byte changed after prepack (same size, same header, same mtime as
// far as the fingerprint knows) is an error at load, never used as is.
TEST_F(PrepackTest, DataChangedAfterPrepackIsAnError) {
  {
    auto f = checkpoint::SafetensorsFile::Open(sidecar_);
    ASSERT_TRUE(f.ok());
    uint64_t recorded = 0;
    ASSERT_TRUE(
        ParseChecksumHex((*f)->metadata().at(checkpoint::kPrepackedChecksumKey), &recorded));
    const uint64_t start = (*f)->header().data_start;
    EXPECT_EQ(ChecksumOf((*f)->mapped_data() + start, (*f)->file_size() - start, 1), recorded);
  }
  uint64_t offset = 0;
  {
    auto f = checkpoint::SafetensorsFile::Open(sidecar_);
    ASSERT_TRUE(f.ok());
    const checkpoint::SafetensorsEntry* w13 = nullptr;
    for (const auto& e : (*f)->header().entries) {
      if (e.name == "layers.2.ffn.experts.w13.weight") w13 = &e;
    }
    ASSERT_NE(w13, nullptr);
    offset = (*f)->header().data_start + (w13->begin + w13->end) / 2;
  }
  const auto mtime = fs::last_write_time(sidecar_);
  {
    std::fstream f(sidecar_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    const char c = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(static_cast<char>(c ^ 0x10));
  }
  fs::last_write_time(sidecar_, mtime);
  auto m = model::Model::Load(*dir_, Policy("auto"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find(sidecar_ + ": data changed after it was written"),
            std::string::npos)
      << m.status().message();
  EXPECT_NE(m.status().message().find("dsv4 prepack --force"), std::string::npos);
  EXPECT_EQ(m.status().message().find('\n'), std::string::npos);
}

// A sidecar of an earlier prepack has no checksum: stale (rebuild it), the
// checkpoint path is used meanwhile.
TEST_F(PrepackTest, SidecarWithoutChecksumIsStale) {
  std::string bytes;
  {
    std::ifstream in(sidecar_, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = bytes.find("\"data_xxh3\":");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 11, "\"data_xxhx\"");  // same length: the layout stays valid
  {
    std::ofstream out(sidecar_, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  auto m = LoadOrDie(*dir_, Policy("auto"));
  EXPECT_EQ(m->prepacked().outcome, checkpoint::PrepackedOutcome::kStale);
  EXPECT_NE(m->prepacked().reason.find("no data checksum"), std::string::npos)
      << m->prepacked().reason;
  ExpectBitwiseEqual(Logits(*m, pool_), *reference_);
}

TEST_F(PrepackTest, FifoSidecarIsUnreadableNotAHang) {
  fs::remove(sidecar_);
  ASSERT_EQ(::mkfifo(sidecar_.c_str(), 0644), 0);
  auto m = LoadOrDie(*dir_, Policy("auto"));
  fs::remove(sidecar_);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->prepacked().outcome, checkpoint::PrepackedOutcome::kUnreadable);
  EXPECT_NE(m->prepacked().reason.find("is a FIFO"), std::string::npos) << m->prepacked().reason;
}

// --output naming an input (directly, through "./", a symlink or a hard
// link) is refused even with --force, and --force replaces only a sidecar.
TEST_F(PrepackTest, RefusesToOverwriteTheCheckpointsOwnFiles) {
  const std::string shard = *dir_ + "/model-00001-of-00003.safetensors";
  std::string before;
  {
    std::ifstream in(shard, std::ios::binary);
    before.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string elsewhere = *dir_ + "-links";
  fs::create_directories(elsewhere);
  fs::create_symlink(shard, elsewhere + "/soft.safetensors");
  fs::create_hard_link(shard, elsewhere + "/hard.safetensors");
  for (const std::string& out :
       {shard, *dir_ + "/./model-00001-of-00003.safetensors", *dir_ + "/config.json",
        *dir_ + "/model.safetensors.index.json", elsewhere + "/soft.safetensors",
        elsewhere + "/hard.safetensors"}) {
    SCOPED_TRACE(out);
    auto r = Pack(*dir_, 1, out, /*force=*/true);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("is the checkpoint's own file"), std::string::npos)
        << r.status().message();
  }
  std::ofstream(*dir_ + "/tokenizer.json") << "{}";
  auto tok = Pack(*dir_, 1, *dir_ + "/tokenizer.json", /*force=*/true);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("is not a prepacked sidecar"), std::string::npos)
      << tok.status().message();
  fs::remove(*dir_ + "/tokenizer.json");
  std::string after;
  {
    std::ifstream in(shard, std::ios::binary);
    after.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_TRUE(before == after);
  fs::remove_all(elsewhere);
  // Replacing the sidecar itself stays allowed.
  EXPECT_TRUE(Pack(*dir_, 1, sidecar_, /*force=*/true).ok());
}

TEST_F(PrepackTest, UnreadableHeaderFallsBack) {
  {
    std::fstream f(sidecar_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put('#');  // the header JSON's opening brace
  }
  auto m = LoadOrDie(*dir_, Policy("auto"));
  EXPECT_EQ(m->prepacked().outcome, checkpoint::PrepackedOutcome::kUnreadable);
}

TEST_F(PrepackTest, ForeignTensorSetFallsBack) {
  auto ckpt = checkpoint::Checkpoint::Open(*dir_);
  ASSERT_TRUE(ckpt.ok());
  auto src = checkpoint::DescribePrepackedSource(**ckpt, 1);
  ASSERT_TRUE(src.ok());
  const float x[4] = {1, 2, 3, 4};
  fs::remove(sidecar_);
  std::map<std::string, std::string> meta = checkpoint::PrepackedMetadata(*src);
  meta[checkpoint::kPrepackedChecksumKey] =
      "0000000000000000";  // names are checked before the data
  ASSERT_TRUE(
      checkpoint::WriteSafetensorsFile(sidecar_, {{"something.else", DType::kF32, {4}, x}}, meta)
          .ok());
  auto m = LoadOrDie(*dir_, Policy("auto"));
  EXPECT_EQ(m->prepacked().outcome, checkpoint::PrepackedOutcome::kMismatch);
  EXPECT_NE(m->prepacked().reason.find("1 unexpected (e.g. something.else)"), std::string::npos)
      << m->prepacked().reason;
}

TEST_F(PrepackTest, RefusesExistingOutputAndUnevenRanks) {
  auto again = Pack(*dir_);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.status().message().find("--force"), std::string::npos);
  EXPECT_TRUE(Pack(*dir_, 1, "", /*force=*/true).ok());
  auto uneven = Pack(*dir_, 3, *dir_ + "/r3.safetensors");
  ASSERT_FALSE(uneven.ok());
  EXPECT_EQ(uneven.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(*dir_ + "/r3.safetensors"));
  for (const auto& e : fs::directory_iterator(*dir_)) {  // no temp file left behind
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  }
}

TEST_F(PrepackTest, CommandLine) {
  const std::string dsv4 = std::string(DSV4_BINARY_DIR) + "/apps/dsv4/dsv4";
  if (!fs::exists(dsv4)) GTEST_SKIP() << "dsv4 binary not built";
  const std::string out = *dir_ + "/cli.out";
  const std::string cmd = dsv4 + " prepack --model " + *dir_ + " > " + out + " 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(cmd.c_str())), 2);  // exists, no --force
  EXPECT_EQ(WEXITSTATUS(std::system((cmd.substr(0, cmd.find(" >")) + " --force > " + out).c_str())),
            0);
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("Wrote " + sidecar_ + " (0.00", 0), 0u) << line;
  EXPECT_NE(line.find(" GiB) in "), std::string::npos) << line;
}

// W8A8 (INT8 experts, fused INT8 shared expert): bitwise identical too.
TEST(PrepackW8a8Test, LogitsAreBitwiseIdentical) {
  const std::string dir =
      (fs::path(DSV4_BINARY_DIR) / "tmp" / ("prepack-w8a8-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  tools::ConvertOptions c;
  c.input_dir = testing::TestDataPath("golden/tiny-a");
  c.output_dir = dir;
  ASSERT_TRUE(tools::ConvertToW8a8(c).ok());
  ASSERT_TRUE(Pack(dir).ok());
  ThreadPool pool(2);
  auto packed = LoadOrDie(dir, Policy("auto"));
  auto plain = LoadOrDie(dir, Policy("off"));
  EXPECT_EQ(packed->prepacked().outcome, checkpoint::PrepackedOutcome::kUsed)
      << packed->prepacked().reason;
  auto f = checkpoint::SafetensorsFile::Open(dir + "/" + checkpoint::PrepackedFileName(1));
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->Find("layers.3.ffn.experts.w13.weight")->shape, (Shape{1, 8, 256, 256}));
  EXPECT_EQ((*f)->Find("layers.3.ffn.experts.w13.scale")->shape, (Shape{1, 8, 256}));
  EXPECT_EQ((*f)->Find("layers.3.ffn.shared_experts.w13.scale")->shape, (Shape{256}));
  ExpectBitwiseEqual(Logits(*packed, &pool), Logits(*plain, &pool));
  fs::remove_all(dir);
}

TEST(ResidencyWindowsTest, WholeSmallFileElse64PageAlignedWindows) {
  EXPECT_TRUE(checkpoint::ResidencyWindows(0, 4096).empty());
  auto small = checkpoint::ResidencyWindows(256ull << 20, 4096);
  ASSERT_EQ(small.size(), 1u);
  EXPECT_EQ(small[0], (std::pair<uint64_t, uint64_t>{0, 256ull << 20}));
  const uint64_t size = (10ull << 30) + 12345;
  auto w = checkpoint::ResidencyWindows(size, 4096);
  ASSERT_EQ(w.size(), 64u);
  EXPECT_EQ(w.front().first, 0u);
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(w[i].first % 4096, 0u);
    EXPECT_EQ(w[i].second, 4ull << 20);
    EXPECT_LE(w[i].first + w[i].second, size);
    if (i > 0) {
      EXPECT_GT(w[i].first, w[i - 1].first + w[i - 1].second);  // disjoint, spread
    }
  }
  EXPECT_GT(w.back().first + w.back().second, size - 4096 - (4ull << 20));  // reaches the end
}

// One gate-up GEMM over [w1; w3] equals the two GEMMs bitwise (the sidecar's
// expert body against the checkpoint's), for every weight format and row
// counts across the kernels' row tiles.
class FusedGateUpTest : public ::testing::Test {
 protected:
  std::mt19937 rng_{7};
  std::vector<uint8_t> Bytes(size_t n, int lo, int hi) {
    std::uniform_int_distribution<int> d(lo, hi);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(d(rng_));
    return v;
  }
  static void ExpectConcat(const std::vector<bf16>& fused, const std::vector<bf16>& g,
                           const std::vector<bf16>& u, int64_t m, int64_t n) {
    for (int64_t r = 0; r < m; ++r) {
      EXPECT_EQ(std::memcmp(&fused[r * 2 * n], &g[r * n], n * 2), 0) << "row " << r;
      EXPECT_EQ(std::memcmp(&fused[r * 2 * n + n], &u[r * n], n * 2), 0) << "row " << r;
    }
  }
};

TEST_F(FusedGateUpTest, Fp4Fp8AndInt8) {
  const int64_t k = 512, n = 256;
  ThreadPool pool(2);
  for (int64_t m : {1, 3, 17, 40}) {
    std::vector<uint8_t> xq = Bytes(m * k, 0, 0x7e);  // finite e4m3 codes
    std::vector<float> xs(m * k / 128, 0.5f);
    std::vector<bf16> g(m * n), u(m * n), f(m * 2 * n);
    // MXFP4: [2n, k/2] codes, [2n, k/32] scales (around 2^0).
    std::vector<uint8_t> c4 = Bytes(2 * n * k / 2, 0, 255), s4 = Bytes(2 * n * k / 32, 120, 130);
    kernels::Fp4Weight w1{c4.data(), s4.data(), n, k};
    kernels::Fp4Weight w3{c4.data() + n * k / 2, s4.data() + n * k / 32, n, k};
    kernels::Fp4Weight w13{c4.data(), s4.data(), 2 * n, k};
    kernels::Fp4Gemm(xq.data(), xs.data(), m, w1, g.data(), &pool);
    kernels::Fp4Gemm(xq.data(), xs.data(), m, w3, u.data(), &pool);
    kernels::Fp4Gemm(xq.data(), xs.data(), m, w13, f.data(), &pool);
    ExpectConcat(f, g, u, m, n);
    // FP8 with 128x128 block scales: [2n/128, k/128] rows of blocks.
    std::vector<uint8_t> c8 = Bytes(2 * n * k, 0, 0x7e),
                         s8 = Bytes(2 * n / 128 * k / 128, 120, 130);
    kernels::Fp8Weight v1{c8.data(), s8.data(), n, k};
    kernels::Fp8Weight v3{c8.data() + n * k, s8.data() + n / 128 * k / 128, n, k};
    kernels::Fp8Weight v13{c8.data(), s8.data(), 2 * n, k};
    kernels::Fp8Gemm(xq.data(), xs.data(), m, v1, g.data(), &pool);
    kernels::Fp8Gemm(xq.data(), xs.data(), m, v3, u.data(), &pool);
    kernels::Fp8Gemm(xq.data(), xs.data(), m, v13, f.data(), &pool);
    ExpectConcat(f, g, u, m, n);
    // INT8 per channel.
    std::vector<uint8_t> qi = Bytes(m * k, 1, 253), ci = Bytes(2 * n * k, 0, 255);
    for (auto& b : qi) b = static_cast<uint8_t>(static_cast<int>(b) - 127);  // [-126, 126]
    std::vector<float> si(m, 0.01f), sw(2 * n, 0.02f);
    const auto* xi = reinterpret_cast<const int8_t*>(qi.data());
    const auto* wi = reinterpret_cast<const int8_t*>(ci.data());
    kernels::Int8Weight q1{wi, sw.data(), n, k}, q3{wi + n * k, sw.data() + n, n, k};
    kernels::Int8Weight q13{wi, sw.data(), 2 * n, k};
    kernels::Int8Gemm(xi, si.data(), m, q1, g.data(), &pool);
    kernels::Int8Gemm(xi, si.data(), m, q3, u.data(), &pool);
    kernels::Int8Gemm(xi, si.data(), m, q13, f.data(), &pool);
    ExpectConcat(f, g, u, m, n);
  }
}

TEST(SafetensorsWriterAlignmentTest, PadsToAlignmentAndReadsBack) {
  const std::string path = (fs::path(DSV4_BINARY_DIR) / "tmp" /
                            ("aligned-" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  fs::create_directories(fs::path(path).parent_path());
  const float a[3] = {1, 2, 3};
  const int64_t b[5] = {1, 2, 3, 4, 5};
  const uint8_t c[1] = {9};
  std::vector<checkpoint::SafetensorsTensorInfo> infos = {
      {"a", DType::kF32, {3}}, {"c", DType::kU8, {1}}, {"b", DType::kI64, {5}}};
  checkpoint::SafetensorsWriterOptions o;
  o.alignment = 64;
  o.unique_temp = true;
  o.mode = 0640;
  auto w = checkpoint::SafetensorsWriter::Create(path, infos, {{"k", "v"}}, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_NE((*w)->temp_path().find(".tmp"), std::string::npos);
  ASSERT_TRUE((*w)->Write("a", a, sizeof(a)).ok());
  ASSERT_TRUE((*w)->Write("b", b, sizeof(b)).ok());
  ASSERT_TRUE((*w)->Write("c", c, sizeof(c)).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto f = checkpoint::SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const auto& h = (*f)->header();
  EXPECT_EQ(h.data_start % 64, 0u);
  std::vector<std::string> order;
  for (const auto& e : h.entries) {
    order.push_back(e.name);
    if (e.name.rfind("__pad.", 0) != 0) {
      EXPECT_EQ(e.begin % 64, 0u) << e.name;
    }
  }
  EXPECT_EQ(order, (std::vector<std::string>{"a", "__pad.0", "c", "__pad.1", "b"}));
  EXPECT_EQ(std::memcmp((*f)->Find("b")->data, b, sizeof(b)), 0);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  std::vector<checkpoint::SafetensorsTensorInfo> bad = {{"__pad.0", DType::kU8, {1}}};
  EXPECT_FALSE(checkpoint::SafetensorsWriter::Create(path + ".x", bad, {}, o).ok());
  fs::remove(path);
}

}  // namespace
}  // namespace dsv4
