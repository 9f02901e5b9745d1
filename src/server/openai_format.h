// Response shaping for /v1/chat/completions and /v1/completions: whole responses, SSE
// chunks ending with "data: [DONE]", usage (in a final chunk with no choices when
// stream_options.include_usage; prompt_tokens_details.cached_tokens: the prompt tokens
// taken from the prefix cache), logprobs in each endpoint's format, tool calls.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "frontend/tool_calls.h"
#include "server/generation_call.h"
#include "server/openai_tools.h"

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
  // Chat tool calls: none (plain content); a named function (the output is its
  // arguments); required (the output is a JSON array of {"name", "arguments"}); auto
  // (the output parsed in tool_format). Calls come as message.tool_calls (content: the
  // text around them, null when none) with finish_reason "tool_calls"; streamed, each
  // call as a delta with its id and name, then its arguments.
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string tool_function;
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
};

std::unique_ptr<CallFormatter> make_openai_formatter(OpenAIFormatOptions options);

// "data: <json>\n\n"
std::string sse_event(const Json& j);

}  // namespace tachyon::server
