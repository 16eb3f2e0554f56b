// Source loading and validation (docs/convert.md "Source validation"), the
// conversion plan and the output config (docs/convert.md "What is converted
// (same rules as the reference)").
#include <filesystem>
#include <set>
#include <utility>

#include "base/file_util.h"
#include "base/mapped_file.h"
#include "checkpoint/weight_spec.h"
#include "tools/convert_internal.h"
#include "tools/convert_numerics.h"

namespace dsv4::tools::convert_internal {

namespace {

namespace fs = std::filesystem;

constexpr char kIndexName[] = "model.safetensors.index.json";

std::string Describe(DType dtype, const Shape& shape) {
  return std::string(DTypeName(dtype)) + " " + ShapeToString(shape);
}

// model_type / architecture and quant_method, checked on the raw JSON so the
// message is the converter's own and comes before any other config check.
Status CheckIdentity(const OrderedJson& j, const std::string& file) {
  bool is_v4 = j.contains("model_type") && j["model_type"] == "deepseek_v4";
  if (!is_v4 && j.contains("architectures") && j["architectures"].is_array()) {
    for (const auto& a : j["architectures"]) is_v4 = is_v4 || a == "DeepseekV4ForCausalLM";
  }
  if (!is_v4) {
    return InvalidArgument(
        "{}: not a DeepSeek-V4 config (model_type must be \"deepseek_v4\" or architectures "
        "must contain \"DeepseekV4ForCausalLM\")",
        file);
  }
  const auto q = j.find("quantization_config");
  const bool fp8 = q != j.end() && q->is_object() && q->contains("quant_method") &&
                   (*q)["quant_method"] == "fp8";
  if (!fp8) {
    return InvalidArgument(
        "{}: quantization_config.quant_method must be \"fp8\" (the native FP8 + MXFP4 "
        "checkpoint); already converted or unsupported",
        file);
  }
  return Status::Ok();
}

Status OpenShards(Source* src, const std::string& index_path) {
  std::set<std::string> files;
  for (const auto& [name, file] : src->index.weight_map) files.insert(file);
  for (const std::string& file : files) {
    SourceShard s;
    s.file = file;
    s.path = (fs::path(src->dir) / file).string();
    if (Status st = CheckRegularFile(s.path); !st.ok()) {
      if (st.code() == StatusCode::kNotFound) {
        return NotFound("{}: shard '{}' is listed but does not exist", index_path, file);
      }
      return st.WithPrefix(fmt::format("{}: shard '{}'", index_path, file));
    }
    DSV4_ASSIGN_OR_RETURN(s.st, checkpoint::SafetensorsFile::Open(s.path));
    src->shards.push_back(std::move(s));
  }
  // Each shard's tensor set must equal the index's.
  for (size_t i = 0; i < src->shards.size(); ++i) {
    const SourceShard& s = src->shards[i];
    for (const checkpoint::SafetensorsEntry& e : s.st->header().entries) {
      const auto it = src->index.weight_map.find(e.name);
      if (it == src->index.weight_map.end() || it->second != s.file) {
        return InvalidArgument(
            "{}: tensor '{}' is in the file but the index does not list it there", s.path, e.name);
      }
      src->where[e.name] = {i, &e};
    }
  }
  for (const auto& [name, file] : src->index.weight_map) {
    if (src->where.count(name) == 0) {
      return InvalidArgument(
          "{}: the index lists tensor '{}' in '{}' but the file does not hold it", index_path, name,
          file);
    }
  }
  return Status::Ok();
}

// Every tensor's dtype and shape from the headers against the native layout;
// INT8-bound weights must have their scale.
Status CheckLayout(const Source& src, const std::string& index_path) {
  const std::vector<checkpoint::WeightSpec> specs = checkpoint::ExpectedWeights(src.cfg);
  std::set<std::string> expected;
  for (const checkpoint::WeightSpec& s : specs) expected.insert(s.name);
  for (const checkpoint::WeightSpec& s : specs) {
    if (s.kind != checkpoint::WeightSpec::kFp8Weight &&
        s.kind != checkpoint::WeightSpec::kFp4Weight)
      continue;
    const std::string module = s.name.substr(0, s.name.size() - 7);  // drop ".weight"
    if (IsInt8Module(module, src.cfg.compress_ratios, src.cfg.num_hidden_layers) &&
        src.where.count(s.name) && !src.where.count(module + ".scale")) {
      return InvalidArgument("{}: weight '{}' is converted to INT8 but has no '{}.scale'",
                             index_path, s.name, module);
    }
  }
  for (const checkpoint::WeightSpec& s : specs) {
    const auto it = src.where.find(s.name);
    if (it == src.where.end()) {
      return NotFound("{}: tensor '{}' ({}) is missing", index_path, s.name,
                      Describe(s.dtype, s.shape));
    }
    const checkpoint::SafetensorsEntry& e = *it->second.second;
    if (e.dtype != s.dtype || e.shape != s.shape) {
      return InvalidArgument("{}: tensor '{}': expected {}, found {}",
                             src.shards[it->second.first].path, s.name, Describe(s.dtype, s.shape),
                             Describe(e.dtype, e.shape));
    }
  }
  for (const auto& [name, loc] : src.where) {
    if (expected.count(name) == 0) {
      return InvalidArgument("{}: unexpected tensor '{}' (not in the DeepSeek-V4 layout)",
                             src.shards[loc.first].path, name);
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Source> LoadSource(const std::string& dir) {
  Source src;
  src.dir = dir;
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const std::string index_path = (fs::path(dir) / kIndexName).string();
  DSV4_ASSIGN_OR_RETURN(src.config_text, ReadFileToString(config_path));
  src.config_json = OrderedJson::parse(src.config_text, nullptr, /*allow_exceptions=*/false);
  if (src.config_json.is_discarded() || !src.config_json.is_object()) {
    return InvalidArgument("{}: not a JSON object", config_path);
  }
  DSV4_RETURN_IF_ERROR(CheckIdentity(src.config_json, config_path));
  DSV4_ASSIGN_OR_RETURN(src.cfg, checkpoint::ParseModelConfig(src.config_text, config_path));
  if (Status st = CheckRegularFile(index_path); !st.ok()) {
    if (st.code() == StatusCode::kNotFound) {
      return NotFound("{}: missing (the converter needs a sharded checkpoint with an index)",
                      index_path);
    }
    return st;
  }
  DSV4_ASSIGN_OR_RETURN(src.index_text, ReadFileToString(index_path));
  DSV4_ASSIGN_OR_RETURN(src.index, checkpoint::ParseCheckpointIndex(src.index_text, index_path));
  DSV4_RETURN_IF_ERROR(OpenShards(&src, index_path));
  DSV4_RETURN_IF_ERROR(CheckLayout(src, index_path));
  return src;
}

Result<Plan> BuildPlan(const Source& src) {
  checkpoint::ModelConfig out_cfg = src.cfg;
  out_cfg.quantization = checkpoint::QuantizationConfig{};
  out_cfg.quantization.quant_method = "compressed-tensors";
  std::map<std::string, checkpoint::WeightSpec> out_specs;
  for (checkpoint::WeightSpec& s : checkpoint::ExpectedWeights(out_cfg))
    out_specs.emplace(s.name, std::move(s));
  std::map<std::string, checkpoint::WeightSpec> in_specs;
  for (checkpoint::WeightSpec& s : checkpoint::ExpectedWeights(src.cfg))
    in_specs.emplace(s.name, std::move(s));

  Plan plan;
  for (const SourceShard& shard : src.shards) {
    ShardPlan sp;
    sp.file = shard.file;
    for (const checkpoint::SafetensorsEntry& e : shard.st->header().entries) {
      const checkpoint::WeightSpec& in = in_specs.at(e.name);
      TensorJob job;
      job.name = e.name;
      const bool is_weight = in.kind == checkpoint::WeightSpec::kFp8Weight ||
                             in.kind == checkpoint::WeightSpec::kFp4Weight;
      if (in.kind == checkpoint::WeightSpec::kFp8Scale ||
          in.kind == checkpoint::WeightSpec::kFp4Scale) {
        job.action = Action::kDropScale;
      } else if (is_weight) {
        const checkpoint::WeightSpec& out = out_specs.at(e.name);
        job.scale_name = e.name.substr(0, e.name.size() - 7) + ".scale";
        job.out_dtype = out.dtype;
        job.out_shape = out.shape;
        if (out.kind == checkpoint::WeightSpec::kInt8Weight) {
          job.action = in.kind == checkpoint::WeightSpec::kFp8Weight ? Action::kFp8ToInt8
                                                                     : Action::kFp4ToInt8;
          ++plan.num_int8;
        } else {
          // Only FP8 weights have a BF16 fallback; MXFP4 are all experts.
          job.action = Action::kFp8ToBf16;
          ++plan.num_bf16;
        }
      } else {
        job.out_dtype = e.dtype;
        job.out_shape = e.shape;
        ++plan.num_copied;
      }
      if (job.action != Action::kDropScale) {
        sp.outputs.push_back({job.name, job.out_dtype, job.out_shape});
        if (job.action == Action::kFp8ToInt8 || job.action == Action::kFp4ToInt8) {
          // The output scale stays with its weight, whatever shard held the source scale.
          sp.outputs.push_back({job.scale_name, DType::kF32, {job.out_shape[0]}});
        }
      }
      sp.jobs.push_back(std::move(job));
    }
    for (const checkpoint::SafetensorsTensorInfo& t : sp.outputs) {
      plan.weight_map[t.name] = sp.file;
      plan.total_size += static_cast<uint64_t>(NumElements(t.shape)) * DTypeSize(t.dtype);
    }
    plan.shards.push_back(std::move(sp));
  }
  return plan;
}

std::string OutputConfigText(const Source& src) {
  const checkpoint::ModelConfig& c = src.cfg;
  OrderedJson ignore = OrderedJson::array();
  auto attn = [&](const std::string& p) {
    for (const char* m : {"attn.wq_a", "attn.wkv", "attn.wo_a"}) ignore.push_back(p + m);
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    attn(p);
    const int64_t ratio = c.compress_ratio(l);
    if (ratio == 4) {
      for (const char* m : {"attn.indexer.weights_proj", "attn.indexer.compressor.wgate",
                            "attn.indexer.compressor.wkv"}) {
        ignore.push_back(p + m);
      }
    }
    if (ratio != 0) {
      ignore.push_back(p + "attn.compressor.wgate");
      ignore.push_back(p + "attn.compressor.wkv");
    }
  }
  for (int64_t k = 0; k < c.num_nextn_predict_layers; ++k) {
    const std::string p = "mtp." + std::to_string(k) + ".";
    attn(p);
    ignore.push_back(p + "head");
  }
  ignore.push_back("head");
  OrderedJson q;
  q["config_groups"]["group_0"] = {{"targets", {"Linear"}},
                                   {"weights",
                                    {{"num_bits", 8},
                                     {"type", "int"},
                                     {"symmetric", true},
                                     {"strategy", "channel"},
                                     {"dynamic", false},
                                     {"observer", "minmax"}}},
                                   {"input_activations",
                                    {{"num_bits", 8},
                                     {"type", "int"},
                                     {"symmetric", true},
                                     {"strategy", "token"},
                                     {"dynamic", true}}}};
  q["format"] = "int-quantized";
  q["ignore"] = std::move(ignore);
  q["kv_cache_scheme"] = nullptr;
  q["li_cache_scheme"] = {{"type", "int"}, {"num_bits", 8}};
  q["quant_method"] = "compressed-tensors";
  q["quantization_status"] = "compressed";
  OrderedJson out = src.config_json;
  out["quantization_config"] = std::move(q);
  return out.dump(2) + "\n";
}

}  // namespace dsv4::tools::convert_internal
