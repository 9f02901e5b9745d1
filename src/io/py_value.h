// A Python value read from a pickle as data, never as code: what a torch.save'd object
// holds besides its tensors (a training run's arguments, counters, RNG states). Every
// global is only a dotted name; a call of one, or an instance of one, is an opaque
// value that records the name, its arguments and the state set on it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon {

struct PyValue {
  enum class Kind : uint8_t {
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kBytes,
    kTuple,
    kList,
    kSet,
    kDict,
    kGlobal,  // a name only (a class, a function, torch.bfloat16)
    kObject,  // a call or an instance of the global `s`, with `items` as its arguments
    kTensor,  // `s`: the tensor's name in its file
  };
  Kind kind = Kind::kNone;
  int64_t i = 0;  // int / bool
  double f = 0;
  std::string s;  // str; bytes; a global's or an object's dotted name; a tensor's name
  // tuple / list / set items; dict keys and values alternating; an object's arguments.
  std::vector<std::shared_ptr<const PyValue>> items;
  // An object's state (BUILD: an instance's attributes, as a dict, or other state).
  std::shared_ptr<const PyValue> state;

  bool is_dict() const { return kind == Kind::kDict; }
  // A dict's value under a string key; nullptr when absent or not a dict.
  const PyValue* get(std::string_view key) const;
  // An object's attribute: the entry of its state dict (an argparse.Namespace's
  // fields); nullptr when absent.
  const PyValue* attr(std::string_view name) const;
  // A short description for error messages: "int 3", "str 'gelu'", "posix.system(...)".
  std::string describe() const;
};

std::string_view py_kind_name(PyValue::Kind kind);

}  // namespace tachyon
