// Response shaping for /v1/chat/completions and /v1/completions: whole responses, SSE
// chunks ending with "data: [DONE]", usage (in a final chunk with no choices when
// stream_options.include_usage; prompt_tokens_details.cached_tokens: the prompt tokens
// taken from the prefix cache), logprobs in each endpoint's format.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/generation_call.h"

namespace tachyon::server {

struct OpenAIFormatOptions {
  bool chat = true;
  std::string model;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  std::vector<int64_t> prompt_tokens;  // per prompt
  std::vector<std::string> echo;       // per prompt (completions with echo); else empty
  // The bytes a token stands for (for logprobs' token, bytes).
  std::function<std::string(int32_t)> token_bytes;
};

std::unique_ptr<CallFormatter> make_openai_formatter(OpenAIFormatOptions options);

// "data: <json>\n\n"
std::string sse_event(const Json& j);

}  // namespace tachyon::server
