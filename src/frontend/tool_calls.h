// Tool calls in a model's output, in the format of its family (vLLM's parser names):
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number,
//                text around them (Hermes, Qwen2.5, Qwen3)
//   llama3_json  the whole output one JSON object {"name": ..., "parameters": {...}} or
//                several separated by ';', after an optional <|python_tag|> (Llama 3.x)
//   mistral      text, then [TOOL_CALLS] and a JSON array of {"name", "arguments"}
// A call that does not parse (bad JSON, no name) stays in the text as it was written.
//
// ToolCallStream reads the output as it is generated: it passes text on as soon as it
// cannot be the start of a call, holds back what may be one, and gives each call whole
// (its name, then its arguments) once it is complete, so that the markup of a call is
// never sent as text.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon {

enum class ToolCallFormat { kHermes, kLlama3Json, kMistral };

// "hermes", "llama3_json", "mistral"; nullopt for any other name.
std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);
std::string_view tool_call_format_name(ToolCallFormat f);
// The format a chat template's source writes tool calls in, when only one fits.
std::optional<ToolCallFormat> detect_tool_call_format(std::string_view chat_template);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text
};

// A piece of the output: text to pass on, or a complete call (its index among the
// output's calls).
struct ToolCallPiece {
  std::string text;
  std::optional<ToolCall> call;
};

class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallFormat format) : format_(format) {}
  // More output; the pieces that can be given now.
  std::vector<ToolCallPiece> feed(std::string_view text);
  // The end of the output: what was held back.
  std::vector<ToolCallPiece> finish();

 private:
  void scan(std::vector<ToolCallPiece>& out, bool at_end);
  void emit_text(std::vector<ToolCallPiece>& out, std::string_view text);

  ToolCallFormat format_;
  std::string pending_;       // held back
  bool in_call_ = false;      // pending_ starts with a call's opening marker
  bool decided_ = false;      // llama3_json: whether the output is calls is known
  bool json_output_ = false;  // llama3_json: the output is (maybe) calls
};

// The calls and the text around them (trimmed; empty when there is only whitespace) of
// a whole output.
struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view output);

// The calls of an output constrained to a JSON array of {"name", "arguments"} objects
// (tool_choice "required"); nullopt when it is not one (cut short).
std::optional<std::vector<ToolCall>> parse_required_tool_calls(std::string_view output);

// A fresh call id: "call_" and 24 random letters and digits.
std::string new_tool_call_id();

}  // namespace tachyon
