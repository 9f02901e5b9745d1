#include "frontend/tool_calls.h"

#include <nlohmann/json.hpp>

#include <random>

namespace tachyon {
namespace {

using OJson = nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// The end (one past) of the JSON object or array starting at s[pos], by its brackets
// and strings; npos when the text ends first.
size_t json_value_end(std::string_view s, size_t pos) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// A call object: "name" and its arguments ("arguments", or llama3's "parameters"), an
// object or a string holding one; absent: {}.
std::optional<ToolCall> call_from(const OJson& j) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  OJson a = OJson::object();
  if (args != j.end()) {
    a = *args;
    if (a.is_string()) a = OJson::parse(a.get<std::string>(), nullptr, false);
    if (!a.is_object()) return std::nullopt;
  }
  return ToolCall{name->get<std::string>(), a.dump()};
}

std::optional<ToolCall> call_from_text(std::string_view text) {
  return call_from(OJson::parse(text, nullptr, false));
}

}  // namespace

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  return std::nullopt;
}

std::string_view tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
  }
  return "?";
}

std::optional<ToolCallFormat> detect_tool_call_format(std::string_view t) {
  std::vector<ToolCallFormat> found;
  if (t.find(kHermesOpen) != std::string_view::npos) found.push_back(ToolCallFormat::kHermes);
  if (t.find(kMistralOpen) != std::string_view::npos) found.push_back(ToolCallFormat::kMistral);
  if (t.find(kPythonTag) != std::string_view::npos ||
      (t.find("<|start_header_id|>") != std::string_view::npos &&
       t.find("\"parameters\"") != std::string_view::npos))
    found.push_back(ToolCallFormat::kLlama3Json);
  if (found.size() != 1) return std::nullopt;
  return found[0];
}

void ToolCallStream::emit_text(std::vector<ToolCallPiece>& out, std::string_view text) {
  if (text.empty()) return;
  if (!out.empty() && !out.back().call)
    out.back().text += text;
  else
    out.push_back({std::string(text), std::nullopt});
}

std::vector<ToolCallPiece> ToolCallStream::feed(std::string_view text) {
  pending_ += text;
  std::vector<ToolCallPiece> out;
  scan(out, false);
  return out;
}

std::vector<ToolCallPiece> ToolCallStream::finish() {
  std::vector<ToolCallPiece> out;
  scan(out, true);
  emit_text(out, pending_);
  pending_.clear();
  return out;
}

void ToolCallStream::scan(std::vector<ToolCallPiece>& out, bool at_end) {
  if (format_ == ToolCallFormat::kLlama3Json) {
    if (!decided_) {
      const std::string_view rest = std::string_view(pending_).substr(skip_space(pending_, 0));
      if (rest.empty() ||
          (kPythonTag.substr(0, rest.size()) == rest && rest.size() < kPythonTag.size()))
        if (!at_end) return;  // not known yet
      decided_ = true;
      json_output_ = rest.rfind(kPythonTag, 0) == 0 || (!rest.empty() && rest[0] == '{');
    }
    if (!json_output_) {
      emit_text(out, pending_);
      pending_.clear();
      return;
    }
    if (!at_end) return;  // a JSON output is read whole
    std::string_view s = pending_;
    size_t i = skip_space(s, 0);
    if (s.substr(i).rfind(kPythonTag, 0) == 0) i += kPythonTag.size();
    std::vector<ToolCall> calls;
    bool ok = true;
    while (ok) {
      i = skip_space(s, i);
      if (i >= s.size()) break;
      const size_t end = s[i] == '{' ? json_value_end(s, i) : std::string_view::npos;
      std::optional<ToolCall> c;
      if (end != std::string_view::npos) c = call_from_text(s.substr(i, end - i));
      if (!c)
        ok = false;
      else
        calls.push_back(std::move(*c));
      if (!ok) break;
      i = skip_space(s, end);
      if (i < s.size() && s[i] == ';') ++i;
    }
    if (!ok || calls.empty()) return;  // left as text by finish()
    for (ToolCall& c : calls) out.push_back({{}, std::move(c)});
    pending_.clear();
    return;
  }
  const std::string_view open = format_ == ToolCallFormat::kHermes ? kHermesOpen : kMistralOpen;
  while (true) {
    std::string_view s = pending_;
    if (!in_call_) {
      const size_t at = s.find(open);
      if (at == std::string_view::npos) {
        // Hold back an end that may be the start of the marker.
        size_t keep = 0;
        if (!at_end)
          for (size_t k = std::min(open.size() - 1, s.size()); k > 0; --k)
            if (s.substr(s.size() - k) == open.substr(0, k)) {
              keep = k;
              break;
            }
        emit_text(out, s.substr(0, s.size() - keep));
        pending_.erase(0, s.size() - keep);
        return;
      }
      emit_text(out, s.substr(0, at));
      pending_.erase(0, at);
      in_call_ = true;
      continue;
    }
    // pending_ starts with the marker.
    size_t consumed = std::string_view::npos;
    std::vector<ToolCall> calls;
    if (format_ == ToolCallFormat::kHermes) {
      // The closing marker after the JSON object (a string in it may spell the marker).
      size_t close = std::string_view::npos;
      const size_t i = skip_space(s, open.size());
      const size_t end =
          i < s.size() && s[i] == '{' ? json_value_end(s, i) : std::string_view::npos;
      if (end != std::string_view::npos) {
        const std::string_view after = s.substr(skip_space(s, end));
        if (after.rfind(kHermesClose, 0) == 0)
          close = s.size() - after.size();
        else if (kHermesClose.substr(0, after.size()) == after && !at_end)
          return;  // the closing marker may be coming
      }
      if (close == std::string_view::npos &&
          (i >= s.size() || s[i] != '{' || end != std::string_view::npos))
        close = s.find(kHermesClose, open.size());
      if (close != std::string_view::npos) {
        consumed = close + kHermesClose.size();
        if (auto c = call_from_text(s.substr(open.size(), close - open.size())))
          calls.push_back(std::move(*c));
      } else if (at_end) {  // the output ended inside the call (stopped at its end)
        consumed = s.size();
        if (auto c = call_from_text(s.substr(open.size()))) calls.push_back(std::move(*c));
      }
    } else {
      const size_t i = skip_space(s, open.size());
      if (i < s.size() && s[i] != '[') {
        consumed = open.size();  // not the array form: text
      } else if (i < s.size()) {
        const size_t end = json_value_end(s, i);
        if (end != std::string_view::npos || at_end) {
          consumed = end != std::string_view::npos ? end : s.size();
          const OJson arr = OJson::parse(s.substr(i, consumed - i), nullptr, false);
          bool ok = arr.is_array() && !arr.empty();
          for (size_t k = 0; ok && k < arr.size(); ++k) {
            std::optional<ToolCall> c = call_from(arr[k]);
            if (c)
              calls.push_back(std::move(*c));
            else
              ok = false;
          }
          if (!ok) calls.clear();
        }
      } else if (at_end) {
        consumed = s.size();
      }
    }
    if (consumed == std::string_view::npos) return;            // wait for more
    if (calls.empty()) emit_text(out, s.substr(0, consumed));  // not a call: left as written
    for (ToolCall& c : calls) out.push_back({{}, std::move(c)});
    pending_.erase(0, consumed);
    in_call_ = false;
  }
}

ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view output) {
  ToolCallStream stream(format);
  std::vector<ToolCallPiece> pieces = stream.feed(output);
  for (ToolCallPiece& p : stream.finish()) pieces.push_back(std::move(p));
  ParsedToolCalls r;
  for (ToolCallPiece& p : pieces) {
    if (p.call)
      r.calls.push_back(std::move(*p.call));
    else
      r.content += p.text;
  }
  const size_t b = skip_space(r.content, 0);
  size_t e = r.content.size();
  while (e > b && is_space(r.content[e - 1])) --e;
  r.content = r.content.substr(b, e - b);
  return r;
}

std::optional<std::vector<ToolCall>> parse_required_tool_calls(std::string_view output) {
  const OJson arr = OJson::parse(output, nullptr, false);
  if (!arr.is_array() || arr.empty()) return std::nullopt;
  std::vector<ToolCall> calls;
  for (const OJson& c : arr) {
    if (!c.is_object() || !c.contains("arguments") || !c["arguments"].is_object())
      return std::nullopt;
    std::optional<ToolCall> call = call_from(c);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  }
  return calls;
}

std::string new_tool_call_id() {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof(kChars) - 1)];
  return id;
}

}  // namespace tachyon
