// RTP-LLM's native API (POST /): request parsing with its field names and aliases.
//   prompt | text           a string, or a list of chat messages
//   messages                a list of chat messages
//   prompt_batch            several prompts (strings or message lists): response_batch
//   generate_config | generation_config   GenerateConfig fields (also accepted at the
//                           top level, where they win, as RTP-LLM does)
//   yield_generator | stream   streaming ("data:" + JSON events, then "data:[done]")
//   generate_config.adapter_name   a LoRA adapter's name for every prompt, or a list of
//                           names aligned with prompt_batch; "" or null: the base model
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "frontend/backend.h"
#include "server/openai_protocol.h"

namespace tachyon::server {

struct NativePrompt {
  bool is_chat = false;
  std::string text;
  Json messages;  // when is_chat
  // generate_config.adapter_name: the LoRA adapter of this prompt ("": the base model).
  std::string adapter_name;
  // Its images: image_url parts of its messages, then the request's "images" for it.
  std::vector<RequestImage> images;
};

struct NativeRequest {
  std::vector<NativePrompt> prompts;
  bool batch = false;  // prompt_batch: {"response_batch": [...]}
  // num_return_sequences >= 1 (or beams): "response" and "aux_info" are lists.
  bool multi = false;
  bool stream = false;
  bool incremental = false;  // return_incremental
  bool return_input_ids = false;
  bool return_output_ids = false;
  bool aux_info = true;
  bool beam_responses = false;  // single format with num_beams > 1: list every beam
  std::optional<int64_t> max_new_tokens;
  Json chat_template_kwargs = Json::object();
  std::string source;  // caller's tag, for logs
  // generate_config.task_id (its key: 1 and "1" alike): the task prompt put before
  // every prompt of the request.
  std::optional<std::string> task_id;
  GenerationParams params;
};

// Throws ApiError (with RTP-LLM error codes) on any problem.
NativeRequest parse_native_request(const Json& body, const RequestLimits& limits,
                                   const OrderedJson* ordered = nullptr);

}  // namespace tachyon::server
