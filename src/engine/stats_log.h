// The engine's periodic statistics line in the log (what vLLM's "Avg prompt
// throughput ... Running ... KV cache usage" line tells an operator): rates
// over the interval since the previous line, the queue and the cache now.
#pragma once

#include <optional>
#include <string>

#include "engine/async_engine.h"

namespace dsv4::engine {

// The line for the `seconds` since `prev`, or nullopt when nothing happened
// (no tokens in the interval, nothing running or waiting): an idle server
// stays quiet.  MTP acceptance appears when drafts were verified in the
// interval.
std::optional<std::string> StatsLogLine(const EngineStats& prev, const EngineStats& cur,
                                        double seconds);

}  // namespace dsv4::engine
