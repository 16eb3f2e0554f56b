#include "tools/make_tiny.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "base/logging.h"
#include "base/mapped_file.h"
#include "base/progress.h"
#include "base/thread_pool.h"
#include "checkpoint/model_config.h"
#include "checkpoint/safetensors_writer.h"
#include "checkpoint/weight_spec.h"
#include "tensor/tensor.h"
#include "tools/make_tiny_config.h"
#include "tools/make_tiny_random.h"
#include "tools/tokenizer_cut.h"

namespace dsv4::tools {

namespace {

namespace fs = std::filesystem;

// Generation works on chunks of this many bytes: large enough to amortize the
// thread-pool handoff and write() calls, small enough to keep memory flat.
constexpr size_t kChunkBytes = size_t{8} << 20;
// Rows a thread takes at least, in bytes.
constexpr size_t kGrainBytes = size_t{64} << 10;

struct Shard {
  std::string file;
  std::vector<const checkpoint::WeightSpec*> tensors;
};

// Shards like the real checkpoint and tiny-a: embed and the first half of the
// main layers, then the second half with the final norm/head/hc_head, then the
// MTP blocks (a model without MTP has two shards).
std::vector<Shard> AssignShards(const std::vector<checkpoint::WeightSpec>& specs,
                                const checkpoint::ModelConfig& cfg) {
  const int64_t num_layers = cfg.num_hidden_layers;
  const int64_t half = (num_layers + 1) / 2;
  const size_t num_shards = cfg.num_nextn_predict_layers > 0 ? 3 : 2;
  std::vector<Shard> shards(num_shards);
  for (size_t i = 0; i < num_shards; ++i) {
    shards[i].file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, num_shards);
  }
  for (const checkpoint::WeightSpec& s : specs) {
    size_t shard;
    if (s.layer < 0) {
      shard = s.name == "embed.weight" ? 0 : 1;
    } else if (s.layer < half) {
      shard = 0;
    } else if (s.layer < num_layers) {
      shard = 1;
    } else {
      shard = 2;
    }
    shards[shard].tensors.push_back(&s);
  }
  return shards;
}

// Generates one tensor chunk by chunk (rows split over the pool) and streams
// it into the writer.
Status WriteTensor(const checkpoint::WeightSpec& spec, const checkpoint::ModelConfig& cfg,
                   uint64_t seed, ThreadPool* pool, std::vector<uint8_t>* buffer,
                   checkpoint::SafetensorsWriter* writer) {
  const TensorGenerator gen(spec, cfg, seed);
  const size_t row_bytes = gen.row_bytes();
  if (gen.num_rows() == 0 || row_bytes == 0) return writer->Write(spec.name, nullptr, 0);
  const int64_t rows_per_chunk = static_cast<int64_t>(std::max<size_t>(1, kChunkBytes / row_bytes));
  const int64_t grain = static_cast<int64_t>(std::max<size_t>(1, kGrainBytes / row_bytes));
  buffer->resize(static_cast<size_t>(std::min(rows_per_chunk, gen.num_rows())) * row_bytes);
  for (int64_t r0 = 0; r0 < gen.num_rows(); r0 += rows_per_chunk) {
    const int64_t n = std::min(rows_per_chunk, gen.num_rows() - r0);
    uint8_t* base = buffer->data();
    ParallelFor(pool, n, grain, [&](int64_t b, int64_t e) {
      gen.FillRows(r0 + b, r0 + e, base + static_cast<size_t>(b) * row_bytes);
    });
    DSV4_RETURN_IF_ERROR(writer->Write(spec.name, base, static_cast<size_t>(n) * row_bytes));
  }
  return Status::Ok();
}

int64_t TensorBytes(const checkpoint::WeightSpec& s) {
  return NumElements(s.shape) * static_cast<int64_t>(DTypeSize(s.dtype));
}

Status WriteShard(const std::string& dir, const Shard& shard, const checkpoint::ModelConfig& cfg,
                  uint64_t seed, ThreadPool* pool, Progress* progress, uint64_t* data_bytes) {
  std::vector<checkpoint::SafetensorsTensorInfo> infos;
  for (const checkpoint::WeightSpec* s : shard.tensors)
    infos.push_back({s->name, s->dtype, s->shape});
  DSV4_ASSIGN_OR_RETURN(
      std::unique_ptr<checkpoint::SafetensorsWriter> writer,
      checkpoint::SafetensorsWriter::Create((fs::path(dir) / shard.file).string(), std::move(infos),
                                            {{"format", "pt"}}));
  std::vector<uint8_t> buffer;
  for (const checkpoint::WeightSpec* s : shard.tensors) {
    DSV4_RETURN_IF_ERROR(WriteTensor(*s, cfg, seed, pool, &buffer, writer.get()));
    progress->Add(TensorBytes(*s));
  }
  DSV4_RETURN_IF_ERROR(writer->Finish());
  *data_bytes = writer->data_bytes();
  return Status::Ok();
}

// Checks the output directory before any work: it must be absent, or an
// empty directory (any directory with `force`).
Status CheckOutDir(const std::string& dir, bool force) {
  if (dir.empty()) return InvalidArgument("an output directory (--out) is required");
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Status::Ok();
  if (!fs::is_directory(dir, ec)) {
    return InvalidArgument("output directory '{}' exists and is not a directory", dir);
  }
  if (!force && !fs::is_empty(dir, ec)) {
    return InvalidArgument("output directory '{}' is not empty (pass --force to overwrite)", dir);
  }
  return Status::Ok();
}

Status CreateOutDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError("cannot create output directory '{}': {}", dir, ec.message());
  return Status::Ok();
}

// The tokenizer search of MakeTinyOptions::tokenizer_json.
Result<std::string> LocateTokenizer(const std::string& explicit_path) {
  const char* env = std::getenv("DSV4_TOKENIZER_JSON");
  std::vector<std::string> dirs;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path().string());
  const fs::path cwd = fs::current_path(ec);
  if (!ec) dirs.push_back(cwd.string());
  return FindTokenizerJson(explicit_path, env != nullptr ? env : "", dirs);
}

Status WriteTokenizerFiles(const std::string& out_dir, const CutTokenizerFiles& tokenizer) {
  const fs::path dir = out_dir;
  DSV4_RETURN_IF_ERROR(
      checkpoint::WriteFileAtomic((dir / "tokenizer.json").string(), tokenizer.tokenizer_json));
  return checkpoint::WriteFileAtomic((dir / "tokenizer_config.json").string(),
                                     tokenizer.tokenizer_config_json);
}

}  // namespace

Status MakeTiny(const MakeTinyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  DSV4_RETURN_IF_ERROR(CheckOutDir(options.out_dir, options.force));
  DSV4_ASSIGN_OR_RETURN(std::string config_text, PresetConfigJson(options.preset));
  DSV4_ASSIGN_OR_RETURN(
      checkpoint::ModelConfig cfg,
      checkpoint::ParseModelConfig(config_text, "make-tiny preset " + options.preset));
  if (options.vocab_size != 0 && !options.tokenizer_only) {
    return InvalidArgument(
        "--vocab-size only applies to --tokenizer-only (a checkpoint's vocabulary comes from its "
        "preset)");
  }
  const int64_t vocab_size = options.vocab_size != 0 ? options.vocab_size : cfg.vocab_size;
  // Tokenizer first: a missing tokenizer fails before gigabytes are written.
  DSV4_ASSIGN_OR_RETURN(std::string tokenizer_path, LocateTokenizer(options.tokenizer_json));
  DSV4_ASSIGN_OR_RETURN(std::string tokenizer_text, ReadFileToString(tokenizer_path));
  DSV4_ASSIGN_OR_RETURN(CutTokenizerFiles tokenizer,
                        CutTokenizer(tokenizer_text, tokenizer_path, vocab_size));
  tokenizer_text.clear();
  DSV4_RETURN_IF_ERROR(CreateOutDir(options.out_dir));
  if (options.tokenizer_only) return WriteTokenizerFiles(options.out_dir, tokenizer);

  const std::vector<checkpoint::WeightSpec> specs = checkpoint::ExpectedWeights(cfg);
  const std::vector<Shard> shards = AssignShards(specs, cfg);
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<ThreadPool> pool_owner,
                        ThreadPool::Create(options.num_threads > 0 ? options.num_threads
                                                                   : ThreadPool::DefaultThreads()));
  ThreadPool& pool = *pool_owner;
  std::map<std::string, std::string> weight_map;
  uint64_t total_bytes = 0;
  int64_t expected_bytes = 0;
  for (const checkpoint::WeightSpec& s : specs) expected_bytes += TensorBytes(s);
  Progress progress("make-tiny " + options.preset, expected_bytes, ProgressUnit::kBytes);
  for (const Shard& shard : shards) {
    uint64_t bytes = 0;
    DSV4_RETURN_IF_ERROR(
        WriteShard(options.out_dir, shard, cfg, options.seed, &pool, &progress, &bytes));
    total_bytes += bytes;
    for (const checkpoint::WeightSpec* s : shard.tensors) weight_map[s->name] = shard.file;
  }
  progress.Finish();
  DSV4_RETURN_IF_ERROR(checkpoint::WriteIndexJson(options.out_dir, weight_map, total_bytes));
  const fs::path dir = options.out_dir;
  DSV4_RETURN_IF_ERROR(checkpoint::WriteFileAtomic((dir / "config.json").string(), config_text));
  DSV4_RETURN_IF_ERROR(checkpoint::WriteFileAtomic((dir / "generation_config.json").string(),
                                                   GenerationConfigJson()));
  DSV4_RETURN_IF_ERROR(WriteTokenizerFiles(options.out_dir, tokenizer));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  DSV4_LOG_INFO(
      "make-tiny: preset {} seed {}: {} tensors, {:.1f} MiB in {} shards, vocab {} "
      "({} BPE + {} added) -> {} ({:.1f} s)",
      options.preset, options.seed, specs.size(), static_cast<double>(total_bytes) / (1 << 20),
      shards.size(), cfg.vocab_size, tokenizer.num_base_tokens,
      cfg.vocab_size - tokenizer.num_base_tokens, options.out_dir, seconds);
  return Status::Ok();
}

}  // namespace dsv4::tools
