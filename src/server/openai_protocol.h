// OpenAI's /v1/chat/completions and /v1/completions requests: strict parsing into one
// description of the work. Unknown or unsupported fields are refused (400 naming the
// field); the fields official clients send that change nothing here (user, stream,
// model, ...) are accepted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "frontend/backend.h"
#include "server/openai_tools.h"

namespace tachyon::server {

using OrderedJson = nlohmann::ordered_json;

// Per-request limits set by the operator.
struct RequestLimits {
  int32_t max_n = 16;           // n / num_return_sequences / num_beams
  int32_t max_stop = 16;        // stop strings (and stop token sequences)
  size_t max_stop_bytes = 256;  // bytes per stop string
  int32_t max_top_logprobs = 20;
  int32_t max_prompts = 64;  // prompts in one batch request
  int64_t max_tokens = 0;    // cap on max_tokens; 0: the model's window
  size_t max_logit_bias = 300;
  int64_t default_timeout_ms = 0;  // per-request generation timeout; 0: none
  int64_t max_timeout_ms = 0;      // cap on a request's own timeout; 0: none
};

// A prompt given as text or as token ids.
struct PromptSpec {
  std::string text;
  std::vector<int32_t> ids;
  bool is_ids = false;
};

struct OpenAIRequest {
  enum class Kind { kChat, kCompletion };
  Kind kind = Kind::kChat;
  std::string model;  // as sent; empty when absent

  // Chat: messages with plain-text content, ready for the template.
  Json messages = Json::array();
  bool add_generation_prompt = true;
  Json chat_template_kwargs = Json::object();
  // Tool calling (openai_tools.h).
  ToolRequest tools;

  // Completions.
  std::vector<PromptSpec> prompts;
  bool echo = false;
  bool add_special_tokens = true;

  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;     // per-token logprobs wanted
  int32_t top_logprobs = 0;  // alternatives per token
  // max_tokens / max_completion_tokens as sent (validated against the window later).
  std::optional<int64_t> max_tokens;
  // Extension: RTP-LLM's task_id (its key: 1 and "1" alike), the task prompt put
  // before the prompt.
  std::optional<std::string> task_id;
  GenerationParams params;  // num_return_sequences = n; max_new_tokens filled in later
};

// Throw ApiError on any problem.
OpenAIRequest parse_chat_request(const Json& body, const RequestLimits& limits,
                                 const OrderedJson* ordered = nullptr);
OpenAIRequest parse_completion_request(const Json& body, const RequestLimits& limits,
                                       const OrderedJson* ordered = nullptr);

// Chat messages (OpenAI form) checked and normalised for the template: content as
// plain text (text parts joined; an assistant's absent or null content as ""),
// "developer" as "system", tool calls' string arguments as objects. `field` names the
// array. With `images`, image_url parts are accepted: appended there, their message's
// content kept as a list of text and image parts (server/image_inputs.h); without,
// refused.
Json parse_chat_messages(const Json* v, const std::string& field,
                         std::vector<RequestImage>* images = nullptr);

// Reads the sampling fields shared by both endpoints (exposed for the native API's
// reuse of logit_bias parsing and for tests).
std::vector<std::pair<int32_t, float>> parse_logit_bias(const Json& v, const std::string& field,
                                                        size_t max_entries);

// The request body again with its objects' keys in the order sent, for what depends on
// it (a JSON Schema's properties, tools as the template renders them); nullopt when the
// body has none of these.
std::optional<OrderedJson> ordered_body(const Json& body, const std::string& text);
// `ordered`'s member `key` (or nullptr), to follow a value down an ordered twin.
const OrderedJson* ordered_member(const OrderedJson* ordered, const std::string& key);

// Structured output, shared with the native API: a response_format object ({"type":
// "text"}: none; "json_object"; "json_schema" with {"name", "schema", "strict",
// "description"}), and the setting of a request's one constraint (a second one is a 400
// naming `field`). `ordered` is v's twin from ordered_body (or nullptr).
std::optional<grammar::GrammarSpec> read_response_format(const Json& v, const std::string& field,
                                                         const OrderedJson* ordered = nullptr);
// A JSON Schema constraint: the schema an object or a boolean (or a string holding its
// JSON, as vLLM's guided_json allows), checked now: a 400 naming `field` and the problem.
grammar::GrammarSpec json_schema_spec(const Json& schema, const OrderedJson* ordered, bool strict,
                                      const std::string& field);
void set_constraint(std::optional<grammar::GrammarSpec>& dst,
                    std::optional<grammar::GrammarSpec> spec, const std::string& field);

// A request's task_id (an integer or a string) as its key (task_id_key); 400 naming
// `field` for any other type.
std::string read_task_id(const Json& v, const std::string& field);

// Refuses a top_p that is not above 0, also once it is a 32-bit float (1e-320 is
// positive as a double and 0 as a float), with the value as given.
void check_top_p(double top_p);

// Resolves max_new_tokens against the model's window for a prompt of prompt_len
// tokens: the requested value (checked to fit) or the room left. Throws
// ApiError::context_length when the prompt (plus the requested tokens) does not fit.
int32_t resolve_max_new_tokens(std::optional<int64_t> requested, int64_t prompt_len,
                               int64_t max_model_len, int64_t cap, const char* prompt_word);

}  // namespace tachyon::server
