#include "io/pickle_machine.h"

#include <cstring>

namespace tachyon::pickle {

namespace {

bool valid_utf8(std::string_view s) {
  static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : 0;
    if (n == 0 || s.size() - i <= n) return false;
    uint32_t cp = c & (0x3f >> n);
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

}  // namespace

Obj* PickleMachine::run() {
  for (;;) {
    if (++ops_ > lim_.max_ops) fail("more than {} opcodes", lim_.max_ops);
    op_pos_ = pos_;
    uint8_t code = u8();
    if (code == '.') break;
    if (!step_scalar(code) && !step_container(code) && !step_stack(code) && !step_object(code))
      fail("unsupported pickle opcode 0x{:02x}", code);
  }
  if (stack_.size() != 1 || !marks_.empty())
    fail("STOP with {} values on the stack", stack_.size());
  return stack_.back();
}

// --- reading ---

std::string_view PickleMachine::take(uint64_t n) {
  if (n > data_.size() - pos_) fail("truncated pickle (needs {} more bytes)", n);
  std::string_view v = data_.substr(pos_, n);
  pos_ += n;
  return v;
}

uint64_t PickleMachine::le(int n) {
  std::string_view b = take(n);
  uint64_t v = 0;
  for (int k = n - 1; k >= 0; --k) v = (v << 8) | static_cast<uint8_t>(b[k]);
  return v;
}

std::string_view PickleMachine::line() {
  size_t end = data_.find('\n', pos_);
  if (end == std::string_view::npos || end - pos_ > 256) fail("bad GLOBAL operand");
  std::string_view v = data_.substr(pos_, end - pos_);
  pos_ = end + 1;
  return v;
}

// --- values ---

Obj* PickleMachine::make(Kind k) {
  if (arena_.size() >= lim_.max_objects) fail("more than {} values", lim_.max_objects);
  arena_.emplace_back();
  arena_.back().kind = k;
  return &arena_.back();
}

Obj* PickleMachine::make_int(int64_t v) {
  Obj* o = make(Kind::kInt);
  o->i = v;
  return o;
}

Obj* PickleMachine::make_str(std::string_view s) {
  if (!valid_utf8(s)) fail("string is not valid UTF-8");
  Obj* o = make(Kind::kStr);
  o->s = s;
  return o;
}

void PickleMachine::count_items(size_t n) {
  items_ += n;
  if (items_ > lim_.max_items) fail("more than {} container items", lim_.max_items);
}

Obj* PickleMachine::make_bytes(std::string_view s) {
  Obj* o = make(Kind::kBytes);
  o->s = s;
  return o;
}

Obj* PickleMachine::make_tuple(std::vector<Obj*> items) {
  count_items(items.size());
  Obj* o = make(Kind::kTuple);
  o->items = std::move(items);
  return o;
}

int64_t PickleMachine::as_int(const Obj* o, std::string_view what) const {
  if (o->kind != Kind::kInt) fail("{} must be an int", what);
  return o->i;
}

// LONG1 / LONG4: little-endian two's complement; only what fits 64 bits.
Obj* PickleMachine::long_int(uint64_t nbytes) {
  std::string_view b = take(nbytes);
  if (nbytes > 8) fail("integer of {} bytes is too large", nbytes);
  uint64_t v = 0;
  for (size_t k = nbytes; k-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[k]);
  if (nbytes > 0 && nbytes < 8 && (static_cast<uint8_t>(b[nbytes - 1]) & 0x80))
    v |= ~uint64_t{0} << (8 * nbytes);
  return make_int(static_cast<int64_t>(v));
}

Obj* PickleMachine::binfloat() {  // big-endian IEEE double
  std::string_view b = take(8);
  uint64_t u = 0;
  for (char c : b) u = (u << 8) | static_cast<uint8_t>(c);
  Obj* o = make(Kind::kFloat);
  std::memcpy(&o->f, &u, 8);
  return o;
}

// --- stack and memo ---

void PickleMachine::push(Obj* o) {
  if (stack_.size() >= lim_.max_stack) fail("stack deeper than {}", lim_.max_stack);
  stack_.push_back(o);
}

Obj* PickleMachine::top() {
  size_t floor = marks_.empty() ? 0 : marks_.back();
  if (stack_.size() <= floor) fail("stack underflow");
  return stack_.back();
}

Obj* PickleMachine::pop() {
  Obj* o = top();
  stack_.pop_back();
  return o;
}

std::vector<Obj*> PickleMachine::pop_mark() {
  if (marks_.empty()) fail("no MARK on the stack");
  size_t m = marks_.back();
  marks_.pop_back();
  std::vector<Obj*> items(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
  stack_.resize(m);
  return items;
}

void PickleMachine::memo_put(uint64_t idx) {
  if (idx >= lim_.max_memo) fail("memo index {} over the limit of {}", idx, lim_.max_memo);
  if (idx >= memo_.size()) memo_.resize(idx + 1, nullptr);
  memo_[idx] = top();
}

Obj* PickleMachine::memo_get(uint64_t idx) {
  if (idx >= memo_.size() || memo_[idx] == nullptr) fail("memo index {} is not set", idx);
  return memo_[idx];
}

void PickleMachine::set_items(Obj* dict, const std::vector<Obj*>& kv) {
  if (dict->kind != Kind::kDict) fail("SETITEM on a value that is not a dict");
  if (kv.size() % 2 != 0) fail("SETITEMS with an odd number of values");
  count_items(kv.size());
  for (size_t i = 0; i < kv.size(); i += 2) {
    if (kv[i]->kind != Kind::kStr) fail("dict keys must be strings");
    // A repeated key (which torch.save never writes) is kept; consumers refuse it.
    dict->items.push_back(kv[i]);
    dict->items.push_back(kv[i + 1]);
  }
}

void PickleMachine::append_items(Obj* list, const std::vector<Obj*>& items) {
  if (list->kind != Kind::kList && list->kind != Kind::kSet)
    fail("APPEND on a value that is not a list");
  count_items(items.size());
  list->items.insert(list->items.end(), items.begin(), items.end());
}

// --- opcodes ---

bool PickleMachine::step_scalar(uint8_t code) {
  switch (code) {
    case 'X':
      push(make_str(take(le(4))));
      return true;  // BINUNICODE
    case 0x8c:
      push(make_str(take(u8())));
      return true;  // SHORT_BINUNICODE
    case 0x8d:
      push(make_str(take(le(8))));
      return true;  // BINUNICODE8
    case 'T':
      push(make_str(take(le(4))));
      return true;  // BINSTRING
    case 'U':
      push(make_str(take(u8())));
      return true;  // SHORT_BINSTRING
    case 'B':
      push(make_bytes(take(le(4))));
      return true;  // BINBYTES
    case 'C':
      push(make_bytes(take(u8())));
      return true;  // SHORT_BINBYTES
    case 0x8e:
      push(make_bytes(take(le(8))));
      return true;  // BINBYTES8
    case 'J':
      push(make_int(static_cast<int32_t>(le(4))));
      return true;  // BININT
    case 'K':
      push(make_int(u8()));
      return true;  // BININT1
    case 'M':
      push(make_int(static_cast<int64_t>(le(2))));
      return true;  // BININT2
    case 0x8a:
      push(long_int(u8()));
      return true;  // LONG1
    case 0x8b:
      push(long_int(le(4)));
      return true;  // LONG4
    case 'G':
      push(binfloat());
      return true;  // BINFLOAT
    case 'N':
      push(make(Kind::kNone));
      return true;  // NONE
    case 0x88:      // NEWTRUE
    case 0x89: {    // NEWFALSE
      Obj* o = make(Kind::kBool);
      o->i = code == 0x88;
      push(o);
      return true;
    }
    default:
      return false;
  }
}

bool PickleMachine::step_container(uint8_t code) {
  switch (code) {
    case '}':
      push(make(Kind::kDict));
      return true;  // EMPTY_DICT
    case ']':
      push(make(Kind::kList));
      return true;  // EMPTY_LIST
    case ')':
      push(make_tuple({}));
      return true;  // EMPTY_TUPLE
    case 't':
      push(make_tuple(pop_mark()));
      return true;
    case 0x85:
      push(make_tuple({pop()}));
      return true;  // TUPLE1
    case 0x86: {    // TUPLE2
      Obj* b = pop();
      push(make_tuple({pop(), b}));
      return true;
    }
    case 0x87: {  // TUPLE3
      Obj* c = pop();
      Obj* b = pop();
      push(make_tuple({pop(), b, c}));
      return true;
    }
    case 'l': {  // LIST
      Obj* l = make(Kind::kList);
      append_items(l, pop_mark());
      push(l);
      return true;
    }
    case 'd': {  // DICT
      std::vector<Obj*> kv = pop_mark();
      Obj* d = make(Kind::kDict);
      set_items(d, kv);
      push(d);
      return true;
    }
    case 's': {  // SETITEM
      Obj* v = pop();
      Obj* k = pop();
      set_items(top(), {k, v});
      return true;
    }
    case 'u': {  // SETITEMS
      std::vector<Obj*> kv = pop_mark();
      set_items(top(), kv);
      return true;
    }
    case 'a': {  // APPEND
      Obj* v = pop();
      append_items(top(), {v});
      return true;
    }
    case 'e': {  // APPENDS
      std::vector<Obj*> items = pop_mark();
      append_items(top(), items);
      return true;
    }
    case 0x8f:
      push(make(Kind::kSet));
      return true;  // EMPTY_SET
    case 0x90: {    // ADDITEMS
      std::vector<Obj*> items = pop_mark();
      if (top()->kind != Kind::kSet) fail("ADDITEMS on a value that is not a set");
      append_items(top(), items);
      return true;
    }
    case 0x91: {  // FROZENSET
      Obj* s = make(Kind::kSet);
      append_items(s, pop_mark());
      push(s);
      return true;
    }
    default:
      return false;
  }
}

bool PickleMachine::step_stack(uint8_t code) {
  switch (code) {
    case 0x80: {  // PROTO
      uint8_t v = u8();
      if (v > 5) fail("unsupported pickle protocol {}", v);
      return true;
    }
    case 0x95:
      le(8);
      return true;  // FRAME: a length hint only
    case '(':       // MARK
      if (marks_.size() >= lim_.max_marks) fail("MARKs nested deeper than {}", lim_.max_marks);
      marks_.push_back(stack_.size());
      return true;
    case '0':
      pop();
      return true;  // POP
    case '1':
      pop_mark();
      return true;  // POP_MARK
    case '2':
      push(top());
      return true;  // DUP
    case 'q':
      memo_put(u8());
      return true;  // BINPUT
    case 'r':
      memo_put(le(4));
      return true;  // LONG_BINPUT
    case 0x94:
      memo_put(memo_.size());
      return true;  // MEMOIZE
    case 'h':
      push(memo_get(u8()));
      return true;  // BINGET
    case 'j':
      push(memo_get(le(4)));
      return true;  // LONG_BINGET
    default:
      return false;
  }
}

bool PickleMachine::step_object(uint8_t code) {
  switch (code) {
    case 'c': {  // GLOBAL
      std::string_view module = line();
      std::string_view name = line();
      push(resolve_global(module, name));
      return true;
    }
    case 0x93: {  // STACK_GLOBAL
      Obj* name = pop();
      Obj* module = pop();
      if (module->kind != Kind::kStr || name->kind != Kind::kStr)
        fail("STACK_GLOBAL needs two strings");
      push(resolve_global(module->s, name->s));
      return true;
    }
    case 'R': {  // REDUCE
      Obj* args = pop();
      Obj* fn = pop();
      if (fn->kind != Kind::kGlobal) fail("REDUCE of a value that is not a global");
      if (args->kind != Kind::kTuple) fail("REDUCE arguments must be a tuple");
      push(call(fn, args));
      return true;
    }
    case 0x81: {  // NEWOBJ
      Obj* args = pop();
      Obj* cls = pop();
      if (cls->kind != Kind::kGlobal) fail("NEWOBJ of a value that is not a global");
      if (args->kind != Kind::kTuple) fail("NEWOBJ arguments must be a tuple");
      push(new_object(cls, args));
      return true;
    }
    case 0x92: {  // NEWOBJ_EX: keyword arguments are kept with the others
      Obj* kwargs = pop();
      Obj* args = pop();
      Obj* cls = pop();
      if (cls->kind != Kind::kGlobal) fail("NEWOBJ_EX of a value that is not a global");
      if (args->kind != Kind::kTuple || kwargs->kind != Kind::kDict)
        fail("NEWOBJ_EX needs a tuple and a dict");
      std::vector<Obj*> all = args->items;
      all.push_back(kwargs);
      push(new_object(cls, make_tuple(std::move(all))));
      return true;
    }
    case 'b': {  // BUILD
      Obj* state = pop();
      build(top(), state);
      return true;
    }
    case 'Q':
      push(persistent_load(pop()));
      return true;  // BINPERSID
    default:
      return false;
  }
}

}  // namespace tachyon::pickle
