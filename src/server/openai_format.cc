#include "server/openai_format.h"

#include <cmath>
#include <optional>
#include <utility>

#include "server/text_util.h"

namespace tachyon::server {

std::string sse_event(const Json& j) {
  return "data: " + dump_json(j) + "\n\n";
}

namespace {

// JSON has no -inf: report it as a very unlikely finite value, as other servers do.
double finite_logprob(float lp) {
  return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0;
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string finish_name(GenFinish f) {
  return f == GenFinish::kLength ? "length" : "stop";
}

class OpenAIFormatter : public CallFormatter {
 public:
  explicit OpenAIFormatter(OpenAIFormatOptions o) : o_(std::move(o)) {
    id_ = (o_.chat ? "chatcmpl-" : "cmpl-") + random_hex(24);
    created_ = unix_time();
    choices_.resize(o_.prompt_tokens.size() * static_cast<size_t>(o_.n));
    for (size_t i = 0; i < choices_.size(); ++i) {
      size_t p = i / static_cast<size_t>(o_.n);
      if (!o_.echo.empty()) {
        choices_[i].text = o_.echo[p];
        choices_[i].offset = code_points(o_.echo[p]);
      }
    }
  }

  bool streaming() const override { return o_.stream; }

  std::string stream_start() override {
    std::string out;
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (o_.chat) {
        out += sse_event(chunk(i, Json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
      } else if (!o_.echo.empty()) {
        out += sse_event(chunk(i, choices_[i].text, nullptr, nullptr));
      }
    }
    return out;
  }

  std::string on_events(size_t p, const std::vector<GenEvent>& events) override {
    std::string out;
    for (const auto& e : events) {
      if (e.done) cached_tokens_ += e.timings.reuse_len;
      if (e.index < 0 || e.index >= o_.n) continue;
      size_t ci = p * static_cast<size_t>(o_.n) + static_cast<size_t>(e.index);
      Choice& c = choices_[ci];
      c.tokens += static_cast<int64_t>(e.token_ids.size());
      Json lp = o_.logprobs && !e.logprobs.empty() ? logprobs_json(c, e) : Json(nullptr);
      if (tools()) {
        tool_text(ci, c, e.text, std::move(lp), out);
        if (e.finish) {
          tool_end(ci, c, out);
          c.finish = finish_name(*e.finish);
          if (!c.calls.empty() && *e.finish != GenFinish::kLength) c.finish = "tool_calls";
          if (o_.stream) out += sse_event(chunk(ci, Json::object(), nullptr, c.finish));
        }
        continue;
      }
      c.text += e.text;
      if (!o_.chat) c.offset += code_points(e.text);
      if (o_.stream && (!e.text.empty() || !lp.is_null())) {
        Json delta = o_.chat ? Json{{"content", e.text}} : Json(e.text);
        out += sse_event(chunk(ci, delta, lp, nullptr));
      }
      if (e.finish) {
        c.finish = finish_name(*e.finish);
        if (o_.stream)
          out += sse_event(chunk(ci, o_.chat ? Json::object() : Json(""), nullptr, c.finish));
      }
    }
    return out;
  }

  std::string finish() override {
    if (o_.stream) {
      std::string out;
      if (o_.include_usage) {
        Json last = base();
        last["choices"] = Json::array();
        last["usage"] = usage();
        out += sse_event(last);
      }
      return out + "data: [DONE]\n\n";
    }
    Json body = base();
    Json choices = Json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
      const Choice& c = choices_[i];
      Json ch = {{"index", i}};
      if (o_.chat && tools()) {
        std::string content = c.text;
        if (!c.calls.empty()) content = trimmed(content);
        ch["message"] = {
            {"role", "assistant"},
            {"content", content.empty() && !c.calls.empty() ? Json(nullptr) : Json(content)}};
        if (!c.calls.empty()) {
          Json calls = Json::array();
          for (const auto& [id, call] : c.calls)
            calls.push_back({{"id", id},
                             {"type", "function"},
                             {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
          ch["message"]["tool_calls"] = std::move(calls);
        }
        ch["logprobs"] = o_.logprobs ? Json{{"content", c.chat_logprobs}} : Json(nullptr);
      } else if (o_.chat) {
        ch["message"] = {{"role", "assistant"}, {"content", c.text}};
        ch["logprobs"] = o_.logprobs ? Json{{"content", c.chat_logprobs}} : Json(nullptr);
      } else {
        ch["text"] = c.text;
        ch["logprobs"] = o_.logprobs ? completion_logprobs(c) : Json(nullptr);
      }
      ch["finish_reason"] = c.finish.empty() ? Json("stop") : Json(c.finish);
      choices.push_back(std::move(ch));
    }
    body["choices"] = std::move(choices);
    body["usage"] = usage();
    return dump_json(body);
  }

  std::string stream_error(const ApiError& e) override {
    return sse_event(e.openai_json()) + "data: [DONE]\n\n";
  }
  Json error_body(const ApiError& e) const override { return e.openai_json(); }

 private:
  struct Choice {
    std::string text;  // with tool calls: the content around them
    std::string raw;   // tool_choice required: the output, parsed at its end
    std::vector<std::pair<std::string, ToolCall>> calls;  // by id
    std::optional<ToolCallStream> parser;                 // tool_choice auto
    size_t offset = 0;  // code points of text so far (completions' text_offset)
    int64_t tokens = 0;
    std::string finish;
    Json chat_logprobs = Json::array();
    Json tokens_json = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(),
         text_offset = Json::array();
  };

  bool tools() const { return o_.chat && o_.tool_choice != ToolChoice::kNone; }

  static std::string trimmed(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return {};
    return s.substr(b, s.find_last_not_of(" \t\r\n") + 1 - b);
  }

  static Json call_delta(size_t index, const std::string& id, const std::string& name) {
    return Json{{"tool_calls", Json::array({{{"index", index},
                                             {"id", id},
                                             {"type", "function"},
                                             {"function", {{"name", name}, {"arguments", ""}}}}})}};
  }
  static Json arguments_delta(size_t index, const std::string& piece) {
    return Json{
        {"tool_calls", Json::array({{{"index", index}, {"function", {{"arguments", piece}}}}})}};
  }

  void add_call(size_t ci, Choice& c, ToolCall call, std::string& out) {
    const size_t index = c.calls.size();
    c.calls.emplace_back(new_tool_call_id(), std::move(call));
    const auto& [id, added] = c.calls.back();
    if (!o_.stream) return;
    out += sse_event(chunk(ci, call_delta(index, id, added.name), nullptr, nullptr));
    out += sse_event(chunk(ci, arguments_delta(index, added.arguments), nullptr, nullptr));
  }
  void add_text(size_t ci, Choice& c, const std::string& text, Json lp, std::string& out) {
    c.text += text;
    if (o_.stream && (!text.empty() || !lp.is_null()))
      out += sse_event(chunk(ci, Json{{"content", text}}, std::move(lp), nullptr));
  }
  void add_pieces(size_t ci, Choice& c, std::vector<ToolCallPiece> pieces, Json lp,
                  std::string& out) {
    for (ToolCallPiece& p : pieces) {
      if (p.call)
        add_call(ci, c, std::move(*p.call), out);
      else
        add_text(ci, c, p.text, std::exchange(lp, nullptr), out);
    }
    if (o_.stream && !lp.is_null())
      out += sse_event(chunk(ci, Json::object(), std::move(lp), nullptr));
  }

  // Output text of a choice with tool calls.
  void tool_text(size_t ci, Choice& c, const std::string& text, Json lp, std::string& out) {
    switch (o_.tool_choice) {
      case ToolChoice::kFunction:  // the output is the arguments
        if (c.calls.empty()) {
          c.calls.emplace_back(new_tool_call_id(), ToolCall{o_.tool_function, ""});
          if (o_.stream)
            out += sse_event(
                chunk(ci, call_delta(0, c.calls[0].first, o_.tool_function), nullptr, nullptr));
        }
        c.calls[0].second.arguments += text;
        if (o_.stream && (!text.empty() || !lp.is_null()))
          out += sse_event(chunk(ci, arguments_delta(0, text), std::move(lp), nullptr));
        return;
      case ToolChoice::kRequired:  // read whole at the end
        c.raw += text;
        if (o_.stream && !lp.is_null())
          out += sse_event(chunk(ci, Json::object(), std::move(lp), nullptr));
        return;
      default:
        if (!c.parser) c.parser.emplace(o_.tool_format);
        add_pieces(ci, c, c.parser->feed(text), std::move(lp), out);
    }
  }
  // The end of a choice's output with tool calls.
  void tool_end(size_t ci, Choice& c, std::string& out) {
    if (o_.tool_choice == ToolChoice::kRequired) {
      if (auto calls = parse_required_tool_calls(c.raw)) {
        for (ToolCall& call : *calls) add_call(ci, c, std::move(call), out);
      } else {
        add_text(ci, c, c.raw, nullptr, out);  // cut short: what was written
      }
    } else if (o_.tool_choice == ToolChoice::kAuto) {
      if (!c.parser) c.parser.emplace(o_.tool_format);
      add_pieces(ci, c, c.parser->finish(), nullptr, out);
    }
  }

  Json base() const {
    return Json{{"id", id_},
                {"object", o_.chat ? (o_.stream ? "chat.completion.chunk" : "chat.completion")
                                   : "text_completion"},
                {"created", created_},
                {"model", o_.model}};
  }

  Json chunk(size_t ci, Json delta, Json logprobs, Json finish) const {
    Json c = base();
    Json choice = {{"index", ci}};
    choice[o_.chat ? "delta" : "text"] = std::move(delta);
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] = std::move(finish);
    c["choices"] = Json::array({std::move(choice)});
    if (o_.include_usage) c["usage"] = nullptr;
    return c;
  }

  Json usage() const {
    int64_t prompt = 0, completion = 0;
    for (int64_t t : o_.prompt_tokens) prompt += t;
    for (const auto& c : choices_) completion += c.tokens;
    return Json{{"prompt_tokens", prompt},
                {"completion_tokens", completion},
                {"total_tokens", prompt + completion},
                {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
  }

  Json token_entry(int32_t token, float logprob) const {
    std::string bytes = o_.token_bytes ? o_.token_bytes(token) : std::string();
    Json b = Json::array();
    for (unsigned char ch : bytes) b.push_back(static_cast<int>(ch));
    return Json{{"token", repair_utf8(bytes)},
                {"logprob", finite_logprob(logprob)},
                {"bytes", std::move(b)}};
  }

  // Adds the event's tokens to the choice's logprobs; returns this chunk's part.
  Json logprobs_json(Choice& c, const GenEvent& e) {
    if (o_.chat) {
      Json content = Json::array();
      for (const auto& t : e.logprobs) {
        Json entry = token_entry(t.token, t.logprob);
        Json top = Json::array();
        for (size_t k = 0; k < t.top.size() && static_cast<int32_t>(k) < o_.top_logprobs; ++k)
          top.push_back(token_entry(t.top[k].first, t.top[k].second));
        entry["top_logprobs"] = std::move(top);
        content.push_back(entry);
        c.chat_logprobs.push_back(std::move(entry));
      }
      return Json{{"content", std::move(content)}};
    }
    Json part = {{"tokens", Json::array()},
                 {"token_logprobs", Json::array()},
                 {"top_logprobs", Json::array()},
                 {"text_offset", Json::array()}};
    size_t offset = c.offset;
    for (const auto& t : e.logprobs) {
      std::string tok = repair_utf8(o_.token_bytes ? o_.token_bytes(t.token) : std::string());
      Json top = nullptr;
      if (o_.top_logprobs > 0) {
        top = Json::object();
        for (size_t k = 0; k < t.top.size() && static_cast<int32_t>(k) < o_.top_logprobs; ++k)
          top[repair_utf8(o_.token_bytes ? o_.token_bytes(t.top[k].first) : std::string())] =
              finite_logprob(t.top[k].second);
      }
      part["tokens"].push_back(tok);
      part["token_logprobs"].push_back(finite_logprob(t.logprob));
      part["top_logprobs"].push_back(top);
      part["text_offset"].push_back(offset);
      c.tokens_json.push_back(tok);
      c.token_logprobs.push_back(finite_logprob(t.logprob));
      c.top_logprobs.push_back(std::move(top));
      c.text_offset.push_back(offset);
      offset += code_points(tok);
    }
    return part;
  }

  Json completion_logprobs(const Choice& c) const {
    return Json{{"tokens", c.tokens_json},
                {"token_logprobs", c.token_logprobs},
                {"top_logprobs", c.top_logprobs},
                {"text_offset", c.text_offset}};
  }

  OpenAIFormatOptions o_;
  std::string id_;
  int64_t created_ = 0;
  std::vector<Choice> choices_;
  int64_t cached_tokens_ = 0;  // prompt tokens the prefix cache gave, over the prompts
};

}  // namespace

std::unique_ptr<CallFormatter> make_openai_formatter(OpenAIFormatOptions options) {
  return std::make_unique<OpenAIFormatter>(std::move(options));
}

}  // namespace tachyon::server
