#include "tests/server/scripted_engine.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/file_util.h"

namespace dsv4::server {

Result<std::vector<std::vector<int32_t>>> LoadTokenScripts(const std::string& path,
                                                           const text::Tokenizer& tokenizer) {
  if (Status s = CheckRegularFile(path); !s.ok()) return s.WithPrefix("token script");
  std::ifstream in(path);
  if (!in) return IoError("cannot open token script {}", path);
  std::vector<std::vector<int32_t>> scripts;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json v = nlohmann::json::parse(line, nullptr, false);
    std::vector<int32_t> ids;
    if (v.is_string()) {
      ids = tokenizer.Encode(v.get<std::string>());
    } else if (v.is_array()) {
      for (const auto& id : v) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
            id.get<int64_t>() >= tokenizer.vocab_size()) {
          return InvalidArgument("{}:{}: ids must be integers in [0, {})", path, line_no,
                                 tokenizer.vocab_size());
        }
        ids.push_back(id.get<int32_t>());
      }
    } else {
      return InvalidArgument("{}:{}: expected a JSON string or an array of ids", path, line_no);
    }
    if (ids.empty()) return InvalidArgument("{}:{}: empty script", path, line_no);
    scripts.push_back(std::move(ids));
  }
  if (scripts.empty()) return InvalidArgument("token script {} has no lines", path);
  return scripts;
}

ScriptedEngine::ScriptedEngine(engine::AsyncEngine& inner,
                               std::vector<std::vector<int32_t>> scripts, int32_t eos_token_id)
    : inner_(inner), scripts_(std::move(scripts)), eos_(eos_token_id) {}

namespace {

// Per-request replay state, touched only on the engine thread (callbacks of
// one request are serialized).
struct Replay {
  std::vector<int32_t> script;  // truncated to what this request may emit
  std::vector<int32_t> stop_ids;
  int64_t max_tokens = 0;
  size_t pos = 0;
  bool done = false;
};

}  // namespace

Result<engine::RequestId> ScriptedEngine::Submit(engine::GenerationRequest request,
                                                 OutputCallback on_output) {
  auto replay = std::make_shared<Replay>();
  replay->script = scripts_[next_script_.fetch_add(1) % scripts_.size()];
  replay->stop_ids = request.stop_token_ids;
  if (!request.sampling.ignore_eos) replay->stop_ids.push_back(eos_);
  // Cut the script after its first stop id so the inner engine runs exactly
  // one step per emitted token (a callback must not call back into the
  // engine, so finishing early by Abort is not an option).
  for (size_t i = 0; i < replay->script.size(); ++i) {
    const int32_t id = replay->script[i];
    if (std::find(replay->stop_ids.begin(), replay->stop_ids.end(), id) != replay->stop_ids.end()) {
      replay->script.resize(i + 1);
      break;
    }
  }
  replay->max_tokens = request.max_tokens;
  request.max_tokens =
      std::min<int64_t>(request.max_tokens, static_cast<int64_t>(replay->script.size()));
  request.stop_token_ids.clear();
  request.sampling.ignore_eos = true;
  auto callback = [replay, on_output](const engine::GenerationOutput& in) {
    if (replay->done) return;
    engine::GenerationOutput out;
    out.id = in.id;
    out.error = in.error;
    out.num_draft_tokens = in.num_draft_tokens;
    out.num_accepted_tokens = in.num_accepted_tokens;
    for (size_t i = 0; i < in.new_tokens.size() && replay->pos < replay->script.size(); ++i) {
      const int32_t id = replay->script[replay->pos++];
      out.new_tokens.push_back(id);
      if (i < in.logprobs.size()) {
        out.logprobs.push_back(in.logprobs[i]);
        out.logprobs.back().token = id;
      }
    }
    if (in.finish != engine::FinishReason::kNone) {
      replay->done = true;
      out.finish = in.finish;
      if (in.finish == engine::FinishReason::kLength || in.finish == engine::FinishReason::kStop) {
        const bool stop_id =
            !out.new_tokens.empty() && std::find(replay->stop_ids.begin(), replay->stop_ids.end(),
                                                 out.new_tokens.back()) != replay->stop_ids.end();
        const bool at_max = static_cast<int64_t>(replay->pos) >= replay->max_tokens;
        out.finish =
            (stop_id || !at_max) ? engine::FinishReason::kStop : engine::FinishReason::kLength;
      }
    }
    on_output(out);
  };
  return inner_.Submit(std::move(request), std::move(callback));
}

}  // namespace dsv4::server
