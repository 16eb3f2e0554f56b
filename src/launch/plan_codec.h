// Bytes for what rank 0 sends the other ranks of an expert-parallel run
// (docs/scale-out.md "Step protocol"): the engine options a follower builds
// its executor from, and each step's StepPlan.  Host byte order: every rank
// of a run is the same binary on the same architecture (start-up compares a
// fingerprint of the binary).  A new field of ScheduledRequest,
// SamplingParams or EngineOptions that a follower needs must be added here.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "engine/step.h"
#include "launch/engine_options.h"

namespace dsv4::launch {

std::vector<uint8_t> EncodePlan(const engine::StepPlan& plan);
// InvalidArgument for bytes that are not an encoded plan (truncated, trailing
// bytes, a count beyond the bytes left).
Result<engine::StepPlan> DecodePlan(const std::vector<uint8_t>& bytes);

// A rank's step result for rank 0 (DP attention across ranks: each rank
// reports its own partition's requests): the step's status (a failed Run) or
// every RequestResult field, each request's error included.
std::vector<uint8_t> EncodeStepResult(const Result<engine::StepResult>& result);
// A failed Run decodes as that error; bytes that are not an encoded result as
// InvalidArgument (*malformed set, so the caller can tell the two apart).
Result<engine::StepResult> DecodeStepResult(const std::vector<uint8_t>& bytes, bool* malformed);

std::vector<uint8_t> EncodeEngineOptions(const EngineOptions& options);
Result<EngineOptions> DecodeEngineOptions(const std::vector<uint8_t>& bytes);

}  // namespace dsv4::launch
