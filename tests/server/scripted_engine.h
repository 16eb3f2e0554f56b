// TEST-ONLY: an AsyncEngine decorator that replays scripted token ids instead
// of the sampled ones (`dsv4_scripted_serve serve --test-script-ids FILE`, a
// test build of the CLI: tests/e2e/scripted_serve_main.cc).  A random test
// model never emits <think>, tool-call markup or EOS on cue, so end-to-end
// tests of reasoning and tool-call responses script the ids the "model"
// generates while the wrapped engine still runs every step (scheduling,
// caching, abort and timing stay real).  Never use it to serve users.
//
// Script file: one JSON value per non-empty line, either an array of token
// ids or a string that is tokenized (special tokens such as <think> or
// ｜DSML｜ match as their ids).  Requests take the lines in submission order,
// cycling.  A scripted request ends with kStop at the first EOS (unless
// ignore_eos) or stop token id, or at the end of its script line; kLength at
// max_tokens.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "text/tokenizer.h"

namespace dsv4::server {

Result<std::vector<std::vector<int32_t>>> LoadTokenScripts(const std::string& path,
                                                           const text::Tokenizer& tokenizer);

class ScriptedEngine : public engine::AsyncEngine {
 public:
  // REQUIRES: `inner` outlives this object; scripts non-empty, none empty.
  ScriptedEngine(engine::AsyncEngine& inner, std::vector<std::vector<int32_t>> scripts,
                 int32_t eos_token_id);

  Result<engine::RequestId> Submit(engine::GenerationRequest request,
                                   OutputCallback on_output) override;
  void Abort(engine::RequestId id) override { inner_.Abort(id); }
  engine::EngineStats Stats() const override { return inner_.Stats(); }
  bool Ready() const override { return inner_.Ready(); }
  void Shutdown() override { inner_.Shutdown(); }

 private:
  engine::AsyncEngine& inner_;
  std::vector<std::vector<int32_t>> scripts_;
  int32_t eos_;
  std::atomic<uint64_t> next_script_{0};
};

}  // namespace dsv4::server
