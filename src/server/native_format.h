// Response shaping for RTP-LLM's native API: {"response", "finished", "aux_info"}
// (lists with num_return_sequences, "response_batch" for prompt_batch), streamed as
// "data:" + JSON events (full text so far, or the new text with return_incremental)
// followed by "data:[done]".
#pragma once

#include <memory>
#include <vector>

#include "server/generation_call.h"

namespace tachyon::server {

struct NativeFormatOptions {
  bool stream = false;
  bool incremental = false;
  bool multi = false;
  bool batch = false;
  bool aux_info = true;
  bool return_input_ids = false;
  bool return_output_ids = false;
  bool beam_responses = false;
  int32_t num_sequences = 1;  // per prompt
  // Per prompt: the request's own token ids, and the task prompt's tokens before them
  // (aux_info's input_len and prefix_len).
  std::vector<std::vector<int32_t>> input_ids;
  std::vector<int32_t> prefix_lens;  // empty: none
};

std::unique_ptr<CallFormatter> make_native_formatter(NativeFormatOptions options);

}  // namespace tachyon::server
