// Chat templates, rendered byte for byte as transformers' apply_chat_template renders
// them (jinja2 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls,
// its tojson, raise_exception and strftime_now; see jinja.h for the language).
//
//   auto set = load_chat_templates("/models/qwen3");            // or from tokenizer_config
//   auto tmpl = ChatTemplate::compile(set.select(std::nullopt, has_tools));
//   ChatTemplateInputs in;
//   in.messages = Json::array({{{"role", "user"}, {"content", "Hi"}}});
//   in.add_generation_prompt = true;
//   in.eos_token = "<|im_end|>";
//   std::string prompt = tmpl.render(in);
//
// Variables a template sees, as transformers passes them: messages, tools, documents
// (None when null), add_generation_prompt, bos_token/eos_token/pad_token/unk_token
// (left undefined when empty, as transformers leaves unset special tokens out), and
// every key of `extra` (chat_template_kwargs such as enable_thinking).
//
// Key order: nlohmann::json (Json) keeps object keys sorted, so `tojson` and `.items()`
// of values given as Json list keys alphabetically. Python keeps insertion order; pass
// OrderedChatTemplateInputs (nlohmann::ordered_json, e.g. a request parsed with
// nlohmann::ordered_json::parse) to render tools and arguments exactly as transformers
// does.
//
// Untrusted text: the strings of messages, tools, documents and extra come from the
// client. render_marked() also returns the byte ranges of the prompt that came from them
// (through output, concatenation, join, trim... as jinja_value.h says); the template's own
// text and the special tokens given here are not in them. The tokenizer matches no special
// token inside those ranges, so a message cannot spell the template's control tokens.
//
// Errors: InvalidArgument for syntax errors (at compile), template errors, failed
// raise_exception() calls and exceeded limits (at render), naming the line.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "chat/jinja.h"
#include "core/json.h"

namespace tachyon {

template <typename J>
struct BasicChatTemplateInputs {
  J messages = J::array();
  bool add_generation_prompt = false;
  J tools;      // null -> None
  J documents;  // null -> None
  std::string bos_token, eos_token, pad_token, unk_token;
  J extra = J::object();  // extra keyword arguments, merged into the context
};
using ChatTemplateInputs = BasicChatTemplateInputs<Json>;
using OrderedChatTemplateInputs = BasicChatTemplateInputs<nlohmann::ordered_json>;

// A rendered prompt and its byte ranges that came from the inputs' untrusted values.
struct RenderedChat {
  std::string text;
  jinja::Spans untrusted;
};

class ChatTemplate {
 public:
  // Limits on `extra` (chat_template_kwargs), which come from requests: keys, and bytes
  // as JSON. Past either, render() throws InvalidArgument naming the limit.
  static constexpr size_t kMaxKwargs = 256;
  static constexpr size_t kMaxKwargsBytes = size_t{1} << 20;

  // Throws InvalidArgument naming the line and column of a syntax error.
  static ChatTemplate compile(std::string_view source);

  // Thread-safe.
  std::string render(const ChatTemplateInputs& inputs) const;
  std::string render(const OrderedChatTemplateInputs& inputs) const;
  std::string render(const ChatTemplateInputs& inputs, const jinja::RenderOptions& options) const;
  std::string render(const OrderedChatTemplateInputs& inputs,
                     const jinja::RenderOptions& options) const;
  RenderedChat render_marked(const ChatTemplateInputs& inputs,
                             const jinja::RenderOptions& options = {}) const;
  RenderedChat render_marked(const OrderedChatTemplateInputs& inputs,
                             const jinja::RenderOptions& options = {}) const;

  const std::string& source() const { return *source_; }

 private:
  template <typename J>
  RenderedChat render_impl(const BasicChatTemplateInputs<J>& inputs,
                           const jinja::RenderOptions& options) const;

  jinja::Template template_;
  std::shared_ptr<const std::string> source_;
};

// The chat templates a checkpoint ships, by name ("default" for a single one).
struct ChatTemplateSet {
  std::map<std::string, std::string> templates;
  // Where each template was read from (a file, or "FILE: chat_template"), for messages.
  std::map<std::string, std::string> origins;

  bool empty() const { return templates.empty(); }
  // transformers' choice: `name` when given; else "tool_use" when tools are passed and
  // it exists; else "default". Throws InvalidArgument when there is none to use.
  const std::string& select(std::optional<std::string_view> name, bool has_tools) const;
  // The selected template compiled; a syntax error names where the template came from.
  ChatTemplate compile(std::optional<std::string_view> name, bool has_tools) const;
};

// tokenizer_config.json's chat_template: a string, or a list of {name, template}.
ChatTemplateSet chat_templates_from_config(const Json& tokenizer_config);

// What transformers loads from a checkpoint directory: chat_template.jinja (and
// additional_chat_templates/*.jinja), else a processor's chat_template.json (multimodal
// models), else tokenizer_config.json.
ChatTemplateSet load_chat_templates(const std::string& model_dir);

// A special token of tokenizer_config.json: a string, or an AddedToken object
// ({"content": ...}); empty when missing or null.
std::string special_token(const Json& tokenizer_config, std::string_view key);

}  // namespace tachyon
