// `tachyon generate` through the engine.
#pragma once

#include <string>

#include "cli/engine_setup.h"
#include "cli/lora_options.h"
#include "core/json.h"
#include "frontend/image_preprocessor.h"

namespace tachyon::cli {

// One request's generate_config: GenerateConfig's fields, and the LoRA adapter its
// adapter_name selects ("" or null: the base model).
struct RequestConfig {
  GenerateConfig config;
  std::string adapter_name;
};

// Reads a generate_config object; throws InvalidArgument naming the field.
RequestConfig request_config(Json config);

// The engine request of `prompt` under `rc`, on its adapter as registered in `adapters`
// (null: the name is only checked). Throws InvalidArgument for an adapter that --lora did
// not give.
GenerateRequest make_request(const LoraOptions& lora, const AdapterRegistry* adapters,
                             std::vector<int32_t> prompt, const RequestConfig& rc);

// Image files (--image, a batch line's "images"), read and decoded in order; each named
// `what`[i] in errors (InvalidArgument, NotFound for a missing file).
std::vector<RequestImage> read_images(const std::vector<std::string>& paths,
                                      const std::string& what);

// Puts `images` into `request` for `model`: each through the model's processor (`pre`,
// null for a model without a vision tower, which takes none), one per image placeholder
// of the prompt ("<image>" in the text), the placeholders expanded. InvalidArgument
// naming `what` for a count of placeholders other than the images', or an image refused.
void attach_images(const ImagePreprocessor* pre, const LanguageModel& model,
                   GenerateRequest& request, const std::vector<RequestImage>& images,
                   const std::string& what);

// Batch mode: each non-empty line of `input` is {"prompt": "..."} or
// {"prompt_ids": [...]}, optionally with "images": [paths] (one per "<image>" of the
// prompt, in order) and "generate_config": {...} (RTP-LLM field names) overriding
// `defaults`. All lines run concurrently through one engine; `output`
// ("-" for stdout) gets one JSON line per input line, in input order: output_ids (no
// EOS), text, finish_reason, aux_info (timings), or error. Returns the number of
// lines that failed.
int run_generate_batch(EngineBundle& bundle, const LoraOptions& lora, const std::string& input,
                       const std::string& output, const Json& defaults,
                       const ImagePreprocessor* images = nullptr);

// One prompt; text pieces stream to stdout as they come unless `json` (one JSON object
// at the end). Returns the result.
GenerateResult run_generate_one(EngineBundle& bundle, GenerateRequest request, bool json);

// The generate_config of a batch line: `defaults` overlaid with the line's own.
RequestConfig merged_config(const Json& defaults, const Json& line);

}  // namespace tachyon::cli
