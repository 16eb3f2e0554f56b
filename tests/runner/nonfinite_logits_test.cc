// A corrupt-but-well-formed checkpoint: tiny-a with one embedding row
// overwritten by NaN.  The request that holds that token must end with
// kError naming the step (its logits are NaN; every sampler would have
// returned token 0), and a request without it must finish normally in the
// same steps, with and without MTP speculation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "checkpoint/safetensors.h"
#include "launch/engine_setup.h"
#include "runner_test_util.h"
#include "testing/golden.h"

namespace dsv4::testing {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kPoisoned = 77;

// A copy of tiny-a whose embed.weight row kPoisoned is all NaN (BF16 0x7fc0).
std::string PoisonedCopy() {
  const fs::path dir = fs::temp_directory_path() / ("dsv4-nonfinite-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(TestDataPath("golden/tiny-a"))) {
    const std::string f = e.path().filename().string();
    if (f == "config.json" || f.rfind("model", 0) == 0) fs::copy_file(e.path(), dir / f);
  }
  const std::string shard = (dir / "model-00001-of-00003.safetensors").string();
  uint64_t offset = 0, row_bytes = 0;
  {
    auto f = checkpoint::SafetensorsFile::Open(shard);
    EXPECT_TRUE(f.ok());
    for (const auto& e : (*f)->header().entries) {
      if (e.name != "embed.weight") continue;
      row_bytes = (e.end - e.begin) / static_cast<uint64_t>(e.shape[0]);
      offset = (*f)->header().data_start + e.begin + row_bytes * kPoisoned;
    }
  }
  EXPECT_GT(row_bytes, 0u);
  std::string nan;
  for (uint64_t i = 0; i < row_bytes / 2; ++i) nan += std::string("\xc0\x7f", 2);
  std::fstream out(shard, std::ios::in | std::ios::out | std::ios::binary);
  out.seekp(static_cast<std::streamoff>(offset));
  out.write(nan.data(), static_cast<std::streamsize>(nan.size()));
  return dir.string();
}

struct Outcome {
  std::vector<int32_t> tokens;
  engine::FinishReason finish = engine::FinishReason::kNone;
  Status error;
};

TEST(NonFiniteLogitsTest, OnlyThePoisonedRequestFails) {
  const std::string dir = PoisonedCopy();
  model::ModelOptions mo;
  mo.prepacked = "off";
  auto model = model::Model::Load(dir, mo);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  for (int32_t k : {0, 2}) {
    SCOPED_TRACE(k);
    launch::EngineOptions o = TestOptions(k);
    o.threads = 2;
    auto engine = launch::StartLocalEngine(**model, o, 256 << 20);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    std::mutex mu;
    std::condition_variable cv;
    std::map<engine::RequestId, Outcome> done;
    auto submit = [&](std::vector<int32_t> prompt) {
      engine::GenerationRequest g;
      g.prompt = std::move(prompt);
      g.max_tokens = 6;
      g.sampling.ignore_eos = true;
      g.sampling.temperature = 0;
      auto id = (*engine)->Submit(std::move(g), [&](const engine::GenerationOutput& out) {
        std::lock_guard<std::mutex> lock(mu);
        Outcome& o2 = done[out.id];
        o2.tokens.insert(o2.tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
        if (out.finish != engine::FinishReason::kNone) {
          o2.finish = out.finish;
          o2.error = out.error;
          cv.notify_all();
        }
      });
      EXPECT_TRUE(id.ok());
      return *id;
    };
    // The poisoned token is the prompt's last, so the sampled row is its
    // own (mid-prompt, its NaN would reach later rows only through the
    // FP8-quantized caches, which turn NaN into finite values).
    const engine::RequestId bad = submit({5, 6, 8, kPoisoned});
    const engine::RequestId good = submit({5, 6, 9, 8});
    {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] {
        return done[bad].finish != engine::FinishReason::kNone &&
               done[good].finish != engine::FinishReason::kNone;
      }));
    }
    (*engine)->Shutdown();
    EXPECT_EQ(done[bad].finish, engine::FinishReason::kError);
    EXPECT_TRUE(done[bad].tokens.empty());
    EXPECT_EQ(done[bad].error.code(), StatusCode::kDataLoss);
    const std::string& msg = done[bad].error.message();
    EXPECT_NE(msg.find("step "), std::string::npos) << msg;
    EXPECT_NE(msg.find("at position 3 are not finite"), std::string::npos) << msg;
    EXPECT_EQ(done[good].finish, engine::FinishReason::kLength) << done[good].error.ToString();
    EXPECT_EQ(done[good].tokens.size(), 6u);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsv4::testing
