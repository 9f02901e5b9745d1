#include "io/py_value.h"

#include <fmt/format.h>

namespace tachyon {

std::string_view py_kind_name(PyValue::Kind kind) {
  using K = PyValue::Kind;
  switch (kind) {
    case K::kNone:
      return "None";
    case K::kBool:
      return "bool";
    case K::kInt:
      return "int";
    case K::kFloat:
      return "float";
    case K::kStr:
      return "str";
    case K::kBytes:
      return "bytes";
    case K::kTuple:
      return "tuple";
    case K::kList:
      return "list";
    case K::kSet:
      return "set";
    case K::kDict:
      return "dict";
    case K::kGlobal:
      return "global";
    case K::kObject:
      return "object";
    case K::kTensor:
      return "tensor";
  }
  return "?";
}

const PyValue* PyValue::get(std::string_view key) const {
  if (kind != Kind::kDict) return nullptr;
  for (size_t k = 0; k + 1 < items.size(); k += 2)
    if (items[k]->kind == Kind::kStr && items[k]->s == key) return items[k + 1].get();
  return nullptr;
}

const PyValue* PyValue::attr(std::string_view name) const {
  if (kind != Kind::kObject || !state) return nullptr;
  if (state->kind == Kind::kDict) return state->get(name);
  // (state, slots) as object.__reduce_ex__ writes it for a class with __slots__.
  if (state->kind == Kind::kTuple && state->items.size() == 2)
    for (const auto& part : state->items)
      if (const PyValue* v = part->get(name)) return v;
  return nullptr;
}

namespace {
std::string printable(std::string_view s, size_t max) {
  std::string out;
  for (char c : s.substr(0, max))
    out.push_back(static_cast<uint8_t>(c) < 0x20 || static_cast<uint8_t>(c) > 0x7e ? '?' : c);
  if (s.size() > max) out += "...";
  return out;
}
}  // namespace

std::string PyValue::describe() const {
  switch (kind) {
    case Kind::kBool:
      return i ? "True" : "False";
    case Kind::kInt:
      return fmt::format("int {}", i);
    case Kind::kFloat:
      return fmt::format("float {}", f);
    case Kind::kStr:
      return fmt::format("str '{}'", printable(s, 60));
    case Kind::kGlobal:
      return fmt::format("the global {}", printable(s, 120));
    case Kind::kObject:
      return fmt::format("{}(...)", printable(s, 120));
    case Kind::kTensor:
      return fmt::format("tensor '{}'", printable(s, 120));
    default:
      return fmt::format("a {}", py_kind_name(kind));
  }
}

}  // namespace tachyon
