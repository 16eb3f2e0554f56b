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

std::vector<uint8_t> EncodeEngineOptions(const EngineOptions& options);
Result<EngineOptions> DecodeEngineOptions(const std::vector<uint8_t>& bytes);

}  // namespace dsv4::launch
