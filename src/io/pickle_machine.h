// The pickle virtual machine under the restricted unpickler: opcodes, stack, marks and
// memo, with hard limits. It never imports or calls anything: resolving a global,
// applying REDUCE/BUILD and loading a persistent id are left to a subclass, which
// decides what (if anything) is allowed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "io/torch_pickle.h"

namespace tachyon::pickle {

enum class Kind : uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kStr,
  kBytes,  // `s` holds the bytes
  kTuple,
  kList,
  kSet,  // items as a list's (sets and frozensets)
  kDict,
  kGlobal,   // an allowed global; `tag` says which
  kObject,   // an opaque call or instance of the global named `s` (the subclass's)
  kStorage,  // `i` indexes the subclass's storages
  kTensor,   // `i` indexes the subclass's tensors
};

// A pickled value. Values live in the machine's arena and refer to each other by
// pointer, so hostile cycles (a list appended to itself) cost nothing to free.
struct Obj {
  Kind kind = Kind::kNone;
  int64_t i = 0;  // int/bool value; storage or tensor index
  double f = 0;
  std::string s;              // str value; a global's dotted name
  int tag = 0;                // global: which one
  DType dtype = DType::kF32;  // global: a storage class's dtype
  std::vector<Obj*> items;    // tuple/list/set; dict as key, value pairs; object arguments
  Obj* state = nullptr;       // object: what BUILD set on it
};

class PickleMachine {
 public:
  PickleMachine(std::string_view data, std::string_view what, const UnpickleLimits& limits)
      : data_(data), what_(what), lim_(limits) {}
  virtual ~PickleMachine() = default;

  // Executes opcodes up to STOP and returns the single value left.
  Obj* run();

 protected:
  // GLOBAL / STACK_GLOBAL: must return a kGlobal value or fail naming the global.
  virtual Obj* resolve_global(std::string_view module, std::string_view name) = 0;
  // REDUCE with a kGlobal callable and a tuple of arguments.
  virtual Obj* call(Obj* fn, Obj* args) = 0;
  // BUILD: set `state` on `target` (or refuse).
  virtual void build(Obj* target, Obj* state) = 0;
  // BINPERSID.
  virtual Obj* persistent_load(Obj* pid) = 0;
  // NEWOBJ / NEWOBJ_EX (cls.__new__(cls, *args)) with a kGlobal class; refused unless
  // the subclass reads instances as opaque values.
  virtual Obj* new_object(Obj* cls, Obj* args) {
    (void)args;
    fail("creating an instance of '{}' is not allowed", cls->s);
  }

  template <typename... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) const {
    raise<InvalidArgument>("{}: pickle offset {}: {}", what_, op_pos_,
                           fmt::format(f, std::forward<A>(a)...));
  }
  Obj* make(Kind k);
  Obj* make_int(int64_t v);
  int64_t as_int(const Obj* o, std::string_view what) const;
  std::string_view what() const { return what_; }
  const UnpickleLimits& limits() const { return lim_; }

 private:
  std::string_view take(uint64_t n);
  uint64_t le(int n);
  uint8_t u8() { return static_cast<uint8_t>(le(1)); }
  std::string_view line();
  Obj* make_str(std::string_view s);
  Obj* make_bytes(std::string_view s);
  Obj* make_tuple(std::vector<Obj*> items);
  Obj* long_int(uint64_t nbytes);
  Obj* binfloat();
  void push(Obj* o);
  Obj* pop();
  Obj* top();
  std::vector<Obj*> pop_mark();
  void memo_put(uint64_t idx);
  Obj* memo_get(uint64_t idx);
  void set_items(Obj* dict, const std::vector<Obj*>& kv);
  void append_items(Obj* list, const std::vector<Obj*>& items);
  void count_items(size_t n);

  bool step_scalar(uint8_t code);
  bool step_container(uint8_t code);
  bool step_stack(uint8_t code);
  bool step_object(uint8_t code);

  std::string_view data_;
  std::string_view what_;
  UnpickleLimits lim_;
  size_t pos_ = 0, op_pos_ = 0;
  uint64_t ops_ = 0;
  size_t items_ = 0;
  std::deque<Obj> arena_;
  std::vector<Obj*> stack_;
  std::vector<size_t> marks_;
  std::vector<Obj*> memo_;
};

}  // namespace tachyon::pickle
