#include "io/torch_pickle.h"

#include <cstring>
#include <deque>
#include <map>
#include <optional>

#include "core/checked.h"
#include "core/error.h"
#include "core/logging.h"

namespace tachyon {

namespace {

enum class Kind : uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kStr,
  kTuple,
  kList,
  kDict,
  kGlobal,
  kStorage,
  kTensor
};

enum class Global : uint8_t {
  kOrderedDict,
  kRebuildTensorV2,
  kRebuildTensor,
  kRebuildParameter,
  kRebuildParameterWithState,
  kStorageClass
};

// A pickled value. Values live in the unpickler's arena and refer to each other by
// pointer, so hostile cycles (a list appended to itself) cost nothing to free.
struct Obj {
  Kind kind = Kind::kNone;
  int64_t i = 0;  // int/bool; storage or tensor index
  double f = 0;
  std::string s;              // str
  Global global{};            // global
  DType dtype = DType::kF32;  // storage class
  std::vector<Obj*> items;    // tuple/list; dict as key, value pairs
};

struct AllowedGlobal {
  std::string_view module, name;
  Global global;
  DType dtype = DType::kF32;
};
constexpr AllowedGlobal kAllowed[] = {
    {"collections", "OrderedDict", Global::kOrderedDict},
    {"torch._utils", "_rebuild_tensor_v2", Global::kRebuildTensorV2},
    {"torch._utils", "_rebuild_tensor", Global::kRebuildTensor},
    {"torch._utils", "_rebuild_parameter", Global::kRebuildParameter},
    {"torch._utils", "_rebuild_parameter_with_state", Global::kRebuildParameterWithState},
    {"torch", "FloatStorage", Global::kStorageClass, DType::kF32},
    {"torch", "HalfStorage", Global::kStorageClass, DType::kF16},
    {"torch", "BFloat16Storage", Global::kStorageClass, DType::kBF16},
    {"torch", "DoubleStorage", Global::kStorageClass, DType::kF64},
    {"torch", "LongStorage", Global::kStorageClass, DType::kI64},
    {"torch", "IntStorage", Global::kStorageClass, DType::kI32},
    {"torch", "ShortStorage", Global::kStorageClass, DType::kI16},
    {"torch", "CharStorage", Global::kStorageClass, DType::kI8},
    {"torch", "ByteStorage", Global::kStorageClass, DType::kU8},
    {"torch", "BoolStorage", Global::kStorageClass, DType::kBool},
};

bool valid_utf8(std::string_view s) {
  static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<uint8_t>(s[i]);
    size_t n = 0;
    uint32_t cp = c;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      auto d = static_cast<uint8_t>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// Product of dims, or nullopt when a partial product overflows.
std::optional<int64_t> checked_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    auto r = checked_mul<int64_t>(n, d);
    if (!r) return std::nullopt;
    n = *r;
  }
  return n;
}

class Unpickler {
 public:
  Unpickler(std::string_view data, std::string_view what, const UnpickleLimits& limits)
      : data_(data), what_(what), lim_(limits) {}

  TorchStateDict run() {
    for (;;) {
      if (++ops_ > lim_.max_ops) fail("more than {} opcodes", lim_.max_ops);
      op_pos_ = pos_;
      uint8_t code = u8();
      if (code == '.') break;
      step(code);
    }
    if (stack_.size() != 1 || !marks_.empty())
      fail("STOP with {} values on the stack", stack_.size());
    return finish(stack_.back());
  }

 private:
  template <typename... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) {
    raise<InvalidArgument>("{}: pickle offset {}: {}", what_, op_pos_,
                           fmt::format(f, std::forward<A>(a)...));
  }

  // --- reading ---
  std::string_view take(uint64_t n) {
    if (n > data_.size() - pos_) fail("truncated pickle (needs {} more bytes)", n);
    std::string_view v = data_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  uint64_t le(int n) {
    std::string_view b = take(n);
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = (v << 8) | static_cast<uint8_t>(b[k]);
    return v;
  }
  uint8_t u8() { return static_cast<uint8_t>(le(1)); }
  std::string_view line() {
    size_t end = data_.find('\n', pos_);
    if (end == std::string_view::npos || end - pos_ > 256) fail("bad GLOBAL operand");
    std::string_view v = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return v;
  }

  // --- values ---
  Obj* make(Kind k) {
    if (arena_.size() >= lim_.max_objects) fail("more than {} values", lim_.max_objects);
    arena_.emplace_back();
    arena_.back().kind = k;
    return &arena_.back();
  }
  Obj* make_int(int64_t v) {
    Obj* o = make(Kind::kInt);
    o->i = v;
    return o;
  }
  Obj* make_str(std::string_view s) {
    if (!valid_utf8(s)) fail("string is not valid UTF-8");
    Obj* o = make(Kind::kStr);
    o->s = s;
    return o;
  }
  void push(Obj* o) {
    if (stack_.size() >= lim_.max_stack) fail("stack deeper than {}", lim_.max_stack);
    stack_.push_back(o);
  }
  Obj* pop() {
    size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) fail("stack underflow");
    Obj* o = stack_.back();
    stack_.pop_back();
    return o;
  }
  Obj* top() {
    size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) fail("stack underflow");
    return stack_.back();
  }
  std::vector<Obj*> pop_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Obj*> items(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Obj* tuple(std::vector<Obj*> items) {
    Obj* o = make(Kind::kTuple);
    o->items = std::move(items);
    return o;
  }
  void memo_put(uint64_t idx) {
    if (idx >= lim_.max_memo) fail("memo index {} over the limit of {}", idx, lim_.max_memo);
    if (idx >= memo_.size()) memo_.resize(idx + 1, nullptr);
    memo_[idx] = top();
  }
  Obj* memo_get(uint64_t idx) {
    if (idx >= memo_.size() || memo_[idx] == nullptr) fail("memo index {} is not set", idx);
    return memo_[idx];
  }
  int64_t as_int(const Obj* o, std::string_view what) {
    if (o->kind != Kind::kInt) fail("{} must be an int", what);
    return o->i;
  }

  void step(uint8_t code);
  void set_items(Obj* dict, const std::vector<Obj*>& kv);
  void append_items(Obj* list, const std::vector<Obj*>& items);
  Obj* global(std::string_view module, std::string_view name);
  Obj* long1(uint64_t n);
  Obj* reduce(Obj* callable, Obj* args);
  Obj* rebuild_tensor(const std::vector<Obj*>& args);
  Shape int_tuple(const Obj* o, std::string_view what);
  Obj* persistent_load(Obj* pid);
  TorchStateDict finish(Obj* root);

  std::string_view data_;
  std::string_view what_;
  UnpickleLimits lim_;
  size_t pos_ = 0, op_pos_ = 0;
  uint64_t ops_ = 0;
  std::deque<Obj> arena_;
  std::vector<Obj*> stack_;
  std::vector<size_t> marks_;
  std::vector<Obj*> memo_;
  TorchStateDict out_;
  std::map<std::string, size_t> storage_by_key_;
  std::vector<TorchTensor> records_;  // unnamed; Obj::i of a tensor indexes here
};

void Unpickler::step(uint8_t code) {
  switch (code) {
    case 0x80: {  // PROTO
      uint8_t v = u8();
      if (v > 5) fail("unsupported pickle protocol {}", v);
      return;
    }
    case 0x95:
      le(8);
      return;  // FRAME: a length hint only
    case '}':
      push(make(Kind::kDict));
      return;
    case ']':
      push(make(Kind::kList));
      return;
    case ')':
      push(tuple({}));
      return;
    case '(':
      if (marks_.size() >= lim_.max_marks) fail("MARKs nested deeper than {}", lim_.max_marks);
      marks_.push_back(stack_.size());
      return;
    case 't':
      push(tuple(pop_mark()));
      return;
    case 0x85: {
      Obj* a = pop();
      push(tuple({a}));
      return;
    }
    case 0x86: {
      Obj* b = pop();
      Obj* a = pop();
      push(tuple({a, b}));
      return;
    }
    case 0x87: {
      Obj* c = pop();
      Obj* b = pop();
      Obj* a = pop();
      push(tuple({a, b, c}));
      return;
    }
    case 'l': {
      Obj* l = make(Kind::kList);
      l->items = pop_mark();
      push(l);
      return;
    }
    case 'd': {
      auto kv = pop_mark();
      Obj* d = make(Kind::kDict);
      set_items(d, kv);
      push(d);
      return;
    }
    case 'X':
      push(make_str(take(le(4))));
      return;  // BINUNICODE
    case 0x8c:
      push(make_str(take(u8())));
      return;  // SHORT_BINUNICODE
    case 0x8d:
      push(make_str(take(le(8))));
      return;  // BINUNICODE8
    case 'T':
      push(make_str(take(le(4))));
      return;  // BINSTRING
    case 'U':
      push(make_str(take(u8())));
      return;  // SHORT_BINSTRING
    case 'J':
      push(make_int(static_cast<int32_t>(le(4))));
      return;
    case 'K':
      push(make_int(u8()));
      return;
    case 'M':
      push(make_int(static_cast<int64_t>(le(2))));
      return;
    case 0x8a:
      push(long1(u8()));
      return;
    case 0x8b:
      push(long1(le(4)));
      return;    // LONG4
    case 'G': {  // BINFLOAT, big-endian
      std::string_view b = take(8);
      uint64_t u = 0;
      for (char c : b) u = (u << 8) | static_cast<uint8_t>(c);
      Obj* o = make(Kind::kFloat);
      std::memcpy(&o->f, &u, 8);
      push(o);
      return;
    }
    case 0x88:
    case 0x89: {
      Obj* o = make(Kind::kBool);
      o->i = code == 0x88;
      push(o);
      return;
    }
    case 'N':
      push(make(Kind::kNone));
      return;
    case 'q':
      memo_put(u8());
      return;
    case 'r':
      memo_put(le(4));
      return;
    case 0x94:
      memo_put(memo_.size());
      return;  // MEMOIZE
    case 'h':
      push(memo_get(u8()));
      return;
    case 'j':
      push(memo_get(le(4)));
      return;
    case 's': {
      Obj* v = pop();
      Obj* k = pop();
      set_items(top(), {k, v});
      return;
    }
    case 'u': {
      auto kv = pop_mark();
      set_items(top(), kv);
      return;
    }
    case 'a': {
      Obj* v = pop();
      append_items(top(), {v});
      return;
    }
    case 'e': {
      auto items = pop_mark();
      append_items(top(), items);
      return;
    }
    case 'c': {  // GLOBAL
      std::string_view module = line();
      std::string_view name = line();
      push(global(module, name));
      return;
    }
    case 0x93: {  // STACK_GLOBAL
      Obj* name = pop();
      Obj* module = pop();
      if (module->kind != Kind::kStr || name->kind != Kind::kStr)
        fail("STACK_GLOBAL needs two strings");
      push(global(module->s, name->s));
      return;
    }
    case 'R': {
      Obj* args = pop();
      Obj* fn = pop();
      push(reduce(fn, args));
      return;
    }
    case 'b': {  // BUILD: attributes are not kept
      pop();
      Kind k = top()->kind;
      if (k != Kind::kDict && k != Kind::kTensor) fail("BUILD on an unsupported value");
      return;
    }
    case 'Q': {
      Obj* pid = pop();
      push(persistent_load(pid));
      return;
    }
    case '0':
      pop();
      return;  // POP
    case '1':
      pop_mark();
      return;  // POP_MARK
    case '2':
      push(top());
      return;  // DUP
    default:
      fail("unsupported pickle opcode 0x{:02x}", code);
  }
}

void Unpickler::set_items(Obj* dict, const std::vector<Obj*>& kv) {
  if (dict->kind != Kind::kDict) fail("SETITEM on a value that is not a dict");
  if (kv.size() % 2 != 0) fail("SETITEMS with an odd number of values");
  for (size_t i = 0; i < kv.size(); i += 2) {
    if (kv[i]->kind != Kind::kStr) fail("dict keys must be strings");
    // A repeated key (which torch.save never writes) is refused in finish().
    dict->items.push_back(kv[i]);
    dict->items.push_back(kv[i + 1]);
  }
}

void Unpickler::append_items(Obj* list, const std::vector<Obj*>& items) {
  if (list->kind != Kind::kList) fail("APPEND on a value that is not a list");
  list->items.insert(list->items.end(), items.begin(), items.end());
}

Obj* Unpickler::global(std::string_view module, std::string_view name) {
  for (const auto& a : kAllowed) {
    if (a.module == module && a.name == name) {
      Obj* o = make(Kind::kGlobal);
      o->global = a.global;
      o->dtype = a.dtype;
      o->s = fmt::format("{}.{}", module, name);
      return o;
    }
  }
  std::string shown = fmt::format("{}.{}", module, name);
  for (char& c : shown)
    if (static_cast<uint8_t>(c) < 0x20 || static_cast<uint8_t>(c) > 0x7e) c = '?';
  fail("refusing the global '{}': only a PyTorch state dict may be loaded", shown);
}

Obj* Unpickler::long1(uint64_t n) {
  std::string_view b = take(n);
  if (n > 8) fail("integer of {} bytes is too large", n);
  uint64_t v = 0;
  for (size_t k = n; k-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[k]);
  if (n > 0 && n < 8 && (static_cast<uint8_t>(b[n - 1]) & 0x80)) v |= ~uint64_t{0} << (8 * n);
  return make_int(static_cast<int64_t>(v));
}

Obj* Unpickler::reduce(Obj* fn, Obj* args) {
  if (fn->kind != Kind::kGlobal) fail("REDUCE of a value that is not a global");
  if (args->kind != Kind::kTuple) fail("REDUCE arguments must be a tuple");
  const auto& a = args->items;
  switch (fn->global) {
    case Global::kOrderedDict:
      if (!a.empty()) fail("OrderedDict with arguments");
      return make(Kind::kDict);
    case Global::kRebuildTensorV2:
      if (a.size() < 4 || a.size() > 7) fail("_rebuild_tensor_v2 with {} arguments", a.size());
      return rebuild_tensor(a);
    case Global::kRebuildTensor:
      if (a.size() != 4) fail("_rebuild_tensor with {} arguments", a.size());
      return rebuild_tensor(a);
    case Global::kRebuildParameter:
    case Global::kRebuildParameterWithState:
      if (a.empty() || a[0]->kind != Kind::kTensor) fail("{} needs a tensor", fn->s);
      return a[0];
    case Global::kStorageClass:
      break;
  }
  fail("calling '{}' is not allowed", fn->s);
}

Shape Unpickler::int_tuple(const Obj* o, std::string_view what) {
  if (o->kind != Kind::kTuple) fail("tensor {} must be a tuple", what);
  if (o->items.size() > lim_.max_dims) fail("tensor {} has {} dims", what, o->items.size());
  Shape s;
  for (const Obj* d : o->items) {
    int64_t v = as_int(d, what);
    if (v < 0) fail("tensor {} has a negative entry {}", what, v);
    s.push_back(v);
  }
  return s;
}

Obj* Unpickler::rebuild_tensor(const std::vector<Obj*>& a) {
  if (a[0]->kind != Kind::kStorage) fail("tensor rebuilt from a value that is not a storage");
  TorchTensor t;
  t.storage = static_cast<size_t>(a[0]->i);
  t.storage_offset = as_int(a[1], "storage offset");
  t.shape = int_tuple(a[2], "size");
  t.stride = int_tuple(a[3], "stride");
  if (t.storage_offset < 0) fail("negative storage offset {}", t.storage_offset);
  if (t.shape.size() != t.stride.size())
    fail("tensor size {} and stride {} differ in rank", shape_str(t.shape), shape_str(t.stride));
  const TorchStorage& st = out_.storages[t.storage];
  // The last element touched must lie inside the storage.
  uint64_t last = static_cast<uint64_t>(t.storage_offset);
  bool empty = false;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] == 0) empty = true;
    auto step = checked_mul<uint64_t>(static_cast<uint64_t>(t.shape[d] == 0 ? 0 : t.shape[d] - 1),
                                      static_cast<uint64_t>(t.stride[d]));
    auto sum = step ? checked_add<uint64_t>(last, *step) : std::nullopt;
    if (!sum) fail("tensor extent overflows");
    last = *sum;
  }
  if (!checked_numel(t.shape)) fail("tensor size {} overflows", shape_str(t.shape));
  if (!empty && last >= static_cast<uint64_t>(st.numel))
    fail("tensor {} at offset {} with stride {} exceeds its storage '{}' of {} elements",
         shape_str(t.shape), t.storage_offset, shape_str(t.stride), st.key, st.numel);
  Obj* o = make(Kind::kTensor);
  o->i = static_cast<int64_t>(records_.size());
  records_.push_back(std::move(t));
  return o;
}

Obj* Unpickler::persistent_load(Obj* pid) {
  const auto& p = pid->items;
  if (pid->kind != Kind::kTuple || p.size() != 5 || p[0]->kind != Kind::kStr ||
      p[0]->s != "storage")
    fail("persistent id is not ('storage', class, key, location, numel)");
  if (p[1]->kind != Kind::kGlobal || p[1]->global != Global::kStorageClass)
    fail("persistent id names no storage class");
  if (p[2]->kind != Kind::kStr || p[2]->s.empty()) fail("storage key must be a string");
  int64_t numel = as_int(p[4], "storage numel");
  if (numel < 0) fail("negative storage numel {}", numel);
  auto [it, fresh] = storage_by_key_.emplace(p[2]->s, out_.storages.size());
  if (fresh) {
    out_.storages.push_back({p[2]->s, p[1]->dtype, numel});
  } else {
    const TorchStorage& st = out_.storages[it->second];
    if (st.dtype != p[1]->dtype || st.numel != numel)
      fail("storage '{}' declared twice with different types or sizes", st.key);
  }
  Obj* o = make(Kind::kStorage);
  o->i = static_cast<int64_t>(it->second);
  return o;
}

TorchStateDict Unpickler::finish(Obj* root) {
  if (root->kind != Kind::kDict) fail("the pickle holds no state dict (a dict of tensors)");
  std::map<std::string, bool> seen;
  for (size_t i = 0; i < root->items.size(); i += 2) {
    const std::string& name = root->items[i]->s;
    Obj* v = root->items[i + 1];
    if (v->kind != Kind::kTensor) {
      log_warning("{}: skipping '{}', which is not a tensor", what_, name);
      continue;
    }
    if (!seen.emplace(name, true).second) fail("tensor '{}' appears twice", name);
    TorchTensor t = records_[static_cast<size_t>(v->i)];
    t.name = name;
    out_.tensors.push_back(std::move(t));
  }
  return std::move(out_);
}

}  // namespace

bool is_contiguous(const Shape& shape, const Shape& stride) {
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] != 1 && stride[d] != expected) return false;
    auto next = checked_mul<int64_t>(expected, shape[d]);
    if (!next) return false;
    expected = *next;
  }
  return true;
}

TorchStateDict unpickle_torch_state_dict(std::string_view pickle, std::string_view what,
                                         const UnpickleLimits& limits) {
  return Unpickler(pickle, what, limits).run();
}

}  // namespace tachyon
