// The model presets of `dsv4 make-tiny` as Hugging Face config.json text,
// with every field of the real DeepSeek-V4-Flash config.json (docs/checkpoint.md "config.json").
//
//   tiny   golden tiny-a's shapes (hidden 256, 6 layers covering all three
//          attention kinds + 1 MTP, window 16, 8 experts) with a 4096-entry
//          vocabulary; about 15 MB.  For tests and demos.
//   bench  real Flash per-layer shapes (hidden 4096, 64 heads x 512,
//          q/o LoRA 1024, 2048-wide experts, 64 indexer heads, window 128,
//          top-512) with 6 layers + MTP, 8 experts (top-6) and a 16384 vocab:
//          1.93 GiB of weights, so decode streams far more than the caches.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4::tools {

std::vector<std::string> MakeTinyPresetNames();

// config.json text of `preset` (an error lists the known names).
Result<std::string> PresetConfigJson(const std::string& preset);

// generation_config.json text (the Flash defaults).
std::string GenerationConfigJson();

}  // namespace dsv4::tools
