// `tachyon generate` through the engine.
#pragma once

#include <string>

#include "cli/engine_setup.h"
#include "core/json.h"

namespace tachyon::cli {

// Batch mode: each non-empty line of `input` is {"prompt": "..."} or
// {"prompt_ids": [...]}, optionally with "generate_config": {...} (RTP-LLM field names)
// overriding `defaults`. All lines run concurrently through one engine; `output`
// ("-" for stdout) gets one JSON line per input line, in input order: output_ids (no
// EOS), text, finish_reason, aux_info (timings), or error. Returns the number of
// lines that failed.
int run_generate_batch(EngineBundle& bundle, const std::string& input, const std::string& output,
                       const Json& defaults);

// One prompt; text pieces stream to stdout as they come unless `json` (one JSON object
// at the end). Returns the result.
GenerateResult run_generate_one(EngineBundle& bundle, std::vector<int32_t> prompt,
                                const GenerateConfig& config, bool json);

// The generate_config of a batch line: `defaults` overlaid with the line's own.
GenerateConfig merged_config(const Json& defaults, const Json& line);

}  // namespace tachyon::cli
