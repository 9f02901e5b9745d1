// Values of the template language, modelled on the Python objects jinja2 works with:
// None, bool, int (64-bit here), float, str (UTF-8), list, tuple, dict (insertion
// ordered, keys of any hashable kind), jinja2's Undefined, and objects (callables,
// namespaces, loop state). Lists, tuples, dicts and strings are immutable and shared.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/json.h"

namespace tachyon::jinja {

// A failure while parsing or rendering; line 0 means "not known yet" (the
// interpreter fills in the line of the node it was evaluating).
struct TemplateError {
  std::string message;
  int line = 0;
  int column = 0;
};
[[noreturn]] void fail(std::string message);

class Value;
class Dict;

// A byte range [begin, end) of a string. A string's untrusted spans (the bytes that came
// from untrusted input, see from_json) are sorted, non-empty, disjoint and not adjacent.
struct Span {
  size_t begin = 0, end = 0;
};
using Spans = std::vector<Span>;
class Object;
class Interpreter;
using ValueList = std::vector<Value>;

class Value {
 public:
  enum class Type : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kObject
  };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value string(std::shared_ptr<const std::string> s);
  // A string whose bytes in `untrusted` came from untrusted input (spans as above).
  static Value string(std::string s, Spans untrusted);
  static Value list(ValueList items, bool tuple = false);
  static Value dict(std::shared_ptr<const Dict> d);
  static Value object(std::shared_ptr<Object> o);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  // int or float or bool (Python's numbers.Number includes bool)
  bool is_number() const {
    return type_ == Type::kInt || type_ == Type::kFloat || type_ == Type::kBool;
  }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }  // list or tuple
  bool is_tuple() const;
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_object() const { return type_ == Type::kObject; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }  // also valid for bool
  double as_float() const { return f_; }
  double to_double() const { return type_ == Type::kFloat ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return *static_cast<const std::string*>(p_.get()); }
  // The untrusted spans of a string (empty for other values).
  const Spans& untrusted() const;
  const ValueList& items() const;
  const Dict& dict() const { return *static_cast<const Dict*>(p_.get()); }
  Object& obj() const { return *static_cast<Object*>(p_.get()); }
  std::shared_ptr<Object> obj_ptr() const { return std::static_pointer_cast<Object>(p_); }
  const std::string& undefined_hint() const;
  // Identity of the shared payload (for `is sameas`).
  const void* identity() const { return p_.get(); }

 private:
  Type type_ = Type::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<void> p_;
  std::shared_ptr<const Spans> untrusted_;
};

// Insertion-ordered mapping with Python key equality (1 == 1.0 == True).
class Dict {
 public:
  void set(Value key, Value value);  // throws TemplateError for unhashable keys
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<Value, Value>> entries_;
  std::unordered_map<std::string, size_t> string_index_;
};

struct CallArgs {
  ValueList args;
  std::vector<std::pair<std::string, Value>> kwargs;
  // Whether a keyword's name came from untrusted input (`**d` of such a dict): the
  // name, made a string again (dict(**d), a macro's kwargs), is untrusted as a whole.
  bool untrusted_names = false;
  const Value* kwarg(std::string_view name) const;
  Value name_value(const std::string& name) const;
};

// Callables and other objects with behaviour (namespace, loop, cycler, macro...).
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  virtual Value getattr(std::string_view name) const;
  virtual bool callable() const { return false; }
  virtual Value call(Interpreter& interp, CallArgs& args);
  virtual std::string repr() const;
};

// namespace(): the one mutable object (`{% set ns.attr = value %}`).
class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  Value getattr(std::string_view name) const override;
  std::string repr() const override;
  void set(std::string_view name, Value v);
  Dict attrs;
};

// Python semantics.
bool truthy(const Value& v);
std::string to_str(const Value& v);  // str(v); undefined gives ""
std::string repr(const Value& v);    // repr(v)
void append_str(std::string& out, const Value& v);
bool equals(const Value& a, const Value& b);
// Ordering as Python's <, raising TypeError-like errors for unorderable pairs.
int compare(const Value& a, const Value& b);
std::string type_name(const Value& v);         // Python type name: 'str', 'dict', ...
std::string object_type_repr(const Value& v);  // "dict object", "None", ...
bool is_hashable(const Value& v);

// json.dumps(v, ensure_ascii=False, indent=..., separators=..., sort_keys=...).
struct JsonFormat {
  bool has_indent = false;
  std::string indent;  // the string one level indents by
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
void dump_json(std::string& out, const Value& v, const JsonFormat& fmt, int depth = 0);

// Converts JSON input (either nlohmann flavour) into template values. With `untrusted`,
// every string in it (object keys included) is marked untrusted as a whole: the render
// keeps track of where its bytes go (see MarkedString).
template <typename J>
Value from_json(const J& j, bool untrusted = false);
extern template Value from_json<nlohmann::json>(const nlohmann::json&, bool);
extern template Value from_json<nlohmann::ordered_json>(const nlohmann::ordered_json&, bool);

// ---- Untrusted text ------------------------------------------------------------------
// Strings from untrusted input carry their untrusted spans through the render: output,
// concatenation (~, +, join), slicing, iteration and the filters and methods that return
// part of their operand (trim, strip, lstrip, rstrip) keep them byte for byte; any other
// string that a filter, method, operator or global builds from untrusted values is
// untrusted as a whole (mark_derived).

// Whether `v` holds untrusted bytes: a string with untrusted spans, or a list, dict or
// namespace that contains one.
bool has_untrusted(const Value& v);
// Appends `src` shifted by `offset` to `dst` (whose spans all end at or before `offset`),
// merging adjacent spans.
void append_spans(Spans& dst, const Spans& src, size_t offset);
// The spans of `s`'s bytes [begin, end), relative to `begin`.
Spans slice_spans(const Spans& s, size_t begin, size_t end);
// The result of an operation on `operand` and `args`: a string, or a list's string,
// without untrusted spans is untrusted as a whole when any input holds untrusted bytes.
Value mark_derived(Value result, const Value& operand, const CallArgs& args);
Value mark_derived(Value result, std::initializer_list<const Value*> inputs);

// A string under construction with its untrusted spans (render output, concatenation).
class MarkedString {
 public:
  void append_trusted(std::string_view s) { text_ += s; }
  // str(v); its untrusted bytes stay untrusted (all of them when v is not a string).
  void append(const Value& v);
  void append(const MarkedString& other);
  const std::string& text() const { return text_; }
  const Spans& untrusted() const { return untrusted_; }
  size_t size() const { return text_.size(); }
  // What it holds, in bytes: the text and its spans (for the render's byte budget).
  size_t bytes() const { return text_.size() + untrusted_.size() * sizeof(Span); }
  Value take();
  std::string take_text() { return std::move(text_); }
  Spans take_untrusted() { return std::move(untrusted_); }

 private:
  std::string text_;
  Spans untrusted_;
};

}  // namespace tachyon::jinja
