// Untrusted spans of strings: how they combine and follow the bytes (see jinja_value.h).
#include <algorithm>

#include "chat/jinja_interp.h"
#include "chat/jinja_value.h"

namespace tachyon::jinja {

bool has_untrusted(const Value& v) {
  switch (v.type()) {
    case Value::Type::kString:
      return !v.untrusted().empty();
    case Value::Type::kList:
      return std::any_of(v.items().begin(), v.items().end(),
                         [](const Value& i) { return has_untrusted(i); });
    case Value::Type::kDict:
      for (const auto& [k, e] : v.dict().entries())
        if (has_untrusted(k) || has_untrusted(e)) return true;
      return false;
    case Value::Type::kObject:
      if (const auto* ns = dynamic_cast<const Namespace*>(&v.obj())) {
        for (const auto& [k, e] : ns->attrs.entries())
          if (has_untrusted(k) || has_untrusted(e)) return true;
      }
      return false;
    default:
      return false;
  }
}

void append_spans(Spans& dst, const Spans& src, size_t offset) {
  for (const Span& s : src) {
    if (s.begin == s.end) continue;
    if (!dst.empty() && dst.back().end == s.begin + offset) {
      dst.back().end = s.end + offset;
    } else {
      dst.push_back({s.begin + offset, s.end + offset});
    }
  }
}

Spans slice_spans(const Spans& spans, size_t begin, size_t end) {
  Spans out;
  for (const Span& s : spans) {
    const size_t b = std::max(s.begin, begin), e = std::min(s.end, end);
    if (b < e) out.push_back({b - begin, e - begin});
  }
  return out;
}

namespace {
Value whole(const Value& s) {
  if (!s.is_string() || s.str().empty() || !s.untrusted().empty()) return s;
  return Value::string(s.str(), Spans{{0, s.str().size()}});
}

bool needs_marks(const Value& result) {
  bool needs = false;
  if (result.is_string()) {
    needs = !result.str().empty() && result.untrusted().empty();
  } else if (result.is_list()) {
    for (const Value& i : result.items())
      needs = needs || (i.is_string() && !i.str().empty() && i.untrusted().empty());
  }
  return needs;
}

Value mark_whole(const Value& result) {
  if (result.is_string()) return whole(result);
  ValueList items;
  items.reserve(result.items().size());
  for (const Value& i : result.items()) items.push_back(whole(i));
  return Value::list(std::move(items), result.is_tuple());
}
}  // namespace

Value mark_derived(Value result, std::initializer_list<const Value*> inputs) {
  if (!needs_marks(result)) return result;
  for (const Value* v : inputs)
    if (v != nullptr && has_untrusted(*v)) return mark_whole(result);
  return result;
}

Value mark_derived(Value result, const Value& operand, const CallArgs& args) {
  if (!needs_marks(result)) return result;
  bool tainted = has_untrusted(operand);
  for (const Value& v : args.args) tainted = tainted || has_untrusted(v);
  for (const auto& [k, v] : args.kwargs) tainted = tainted || has_untrusted(v);
  return tainted ? mark_whole(result) : result;
}

Value mark_filter_result(std::string_view name, Value result, const Value& operand,
                         const CallArgs& args) {
  const bool part_of_operand =
      name == "trim" || name == "strip" || name == "lstrip" || name == "rstrip";
  if (part_of_operand && operand.is_string() && result.is_string() && result.untrusted().empty() &&
      !operand.untrusted().empty()) {
    // What these return starts with a character they do not strip, so its first
    // occurrence in the operand is where it was taken from.
    const size_t at = operand.str().find(result.str());
    if (at != std::string::npos) {
      Spans marks = slice_spans(operand.untrusted(), at, at + result.str().size());
      return Value::string(result.str(), std::move(marks));
    }
  }
  return mark_derived(std::move(result), operand, args);
}

void MarkedString::append(const Value& v) {
  const size_t offset = text_.size();
  append_str(text_, v);
  if (v.is_string()) {
    append_spans(untrusted_, v.untrusted(), offset);
  } else if (text_.size() > offset && has_untrusted(v)) {
    append_spans(untrusted_, Spans{{0, text_.size() - offset}}, offset);
  }
}

void MarkedString::append(const MarkedString& other) {
  const size_t offset = text_.size();
  text_ += other.text_;
  append_spans(untrusted_, other.untrusted_, offset);
}

Value MarkedString::take() {
  return Value::string(std::move(text_), std::move(untrusted_));
}

}  // namespace tachyon::jinja
