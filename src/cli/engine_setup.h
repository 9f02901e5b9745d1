// Opening a model folder as a running engine, for the commands that drive AsyncModel
// (generate, bench, later serve): the model, its tokenizer when it has one, and the
// engine sized by the flags below.
//   --kv-cache-mb MB        KV cache budget (default: 20% of available memory, at most
//                           what the expected number of full-length sequences need)
//   --max-num-seqs N        sequences in flight (default 128)
//   --max-batch-tokens N    tokens per engine step (default 512)
//   --block-size N          tokens per KV block (default 16)
//   --model-type NAME       architecture override
//   --device D              cpu, cuda, cuda:N or auto (default: TACHYON_DEVICE, else auto)
//   --dtype T               compute dtype on a GPU: bf16 (default), f16, f32
//   --gpu-memory-fraction F on a GPU without --kv-cache-mb, the KV cache takes what F of
//                           the device's memory leaves after weights and workspace (0.9)
//   --kv-cache-dtype T      auto (the compute dtype) or fp8 (e4m3, on a GPU: half the
//                           bytes per token)
//   --swap-space GIB        pinned host memory where preempted requests' KV blocks wait
//                           instead of being recomputed (default 4 on a GPU, 0 on the CPU)
//   --overlap-steps on|off  queue each step before the host has seen the tokens of the
//                           one in flight (EngineConfig::overlap_steps; default on)
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/args.h"
#include "frontend/text_engine.h"
#include "model/decoder.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::cli {

struct EngineBundle {
  std::shared_ptr<Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;  // null when the folder has none
  std::unique_ptr<TextEngine> engine;
  double load_seconds = 0;
};

// LoadOptions from --model-type, --device, --dtype and --kv-cache-dtype.
LoadOptions load_options(const Args& args);
// The value flags open_engine() reads (add them to the command's own).
std::set<std::string> engine_flags();
// expected_seqs: sequences the caller will run at once, for the default KV budget
// (0: max-num-seqs).
EngineBundle open_engine(const std::string& model_dir, const Args& args, int32_t expected_seqs = 0);

// Free memory on this host (MemAvailable), or 0 when unknown.
int64_t host_memory_available();

// A prompt from a JSONL line or flag: {"prompt": "..."} (needs the tokenizer; special
// tokens added as the tokenizer does) or {"prompt_ids": [...]}.
std::vector<int32_t> prompt_from_json(const Json& line, const Tokenizer* tokenizer);

// The RTP-LLM style result object of one finished request.
Json result_json(const GenerateResult& r);

}  // namespace tachyon::cli
