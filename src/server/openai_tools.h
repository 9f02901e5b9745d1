// OpenAI tool calling in a chat request: `tools` (functions with JSON Schema parameters),
// `tool_choice` and `parallel_tool_calls`, checked, and the constraint that forces the
// calls when tool_choice is "required" or names a function (as vLLM does):
//   a named function   the output is its arguments: a JSON object valid under its
//                      parameters
//   "required"         the output is a JSON array of one or more {"name": ...,
//                      "arguments": {...}} objects of the declared functions (at most
//                      one when parallel_tool_calls is false)
// A function's `strict` puts its schema in OpenAI's strict mode ("required": when every
// function is strict).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "grammar/compile.h"
#include "server/json_fields.h"

namespace tachyon::server {

using OrderedJson = nlohmann::ordered_json;

enum class ToolChoice { kNone, kAuto, kRequired, kFunction };

struct ToolRequest {
  OrderedJson tools;  // as sent (key order kept when known); null: none
  std::vector<std::string> names;
  ToolChoice choice = ToolChoice::kNone;  // default: auto with tools, none without
  std::string function;                   // kFunction: the function's name
  bool parallel = true;
};

// Reads the fields from a chat request (`ordered`: its twin from ordered_body, or
// nullptr) and refuses the legacy `functions` / `function_call`. Sets `constraint` for
// "required" and a named function (a 400 if the request has another constraint).
ToolRequest read_tools(FieldReader& r, const OrderedJson* ordered,
                       std::optional<grammar::GrammarSpec>& constraint);

// Assistant messages' tool_calls with function.arguments given as a JSON string are
// passed to templates with the arguments as an object (as vLLM does: templates such as
// Qwen's write them with tojson).
void tool_call_arguments_as_objects(Json& messages);

}  // namespace tachyon::server
