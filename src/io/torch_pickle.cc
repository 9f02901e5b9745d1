#include "io/torch_pickle.h"

#include <map>
#include <optional>

#include "core/checked.h"
#include "core/error.h"
#include "core/logging.h"
#include "io/pickle_machine.h"

namespace tachyon {

namespace {

using pickle::Kind;
using pickle::Obj;

enum class Global : int {
  kOrderedDict,
  kRebuildTensorV2,
  kRebuildTensor,
  kRebuildParameter,
  kRebuildParameterWithState,
  kStorageClass,
  kOpaque,  // object mode: any other global, by name only
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

// The torch state-dict semantics on top of the pickle machine: which globals exist,
// what calling them builds, and how persistent ids name storages.
class Unpickler : public pickle::PickleMachine {
 public:
  // objects: read any object as data (opaque globals), else only a state dict.
  Unpickler(std::string_view data, std::string_view what, const UnpickleLimits& limits,
            bool objects)
      : PickleMachine(data, what, limits), objects_(objects) {}
  TorchStateDict unpickle() { return finish(run()); }
  TorchObject unpickle_object();

 protected:
  Obj* resolve_global(std::string_view module, std::string_view name) override;
  Obj* call(Obj* fn, Obj* args) override;
  void build(Obj* target, Obj* state) override;
  Obj* persistent_load(Obj* pid) override;
  Obj* new_object(Obj* cls, Obj* args) override;

 private:
  Obj* opaque(Obj* fn, Obj* args);
  std::shared_ptr<const PyValue> convert(Obj* o, const std::string& path, int depth);

  Obj* rebuild_tensor(const std::vector<Obj*>& args);
  Shape int_tuple(const Obj* o, std::string_view what);
  TorchStateDict finish(Obj* root);

  bool objects_ = false;
  TorchStateDict out_;
  std::map<const Obj*, std::shared_ptr<const PyValue>> converted_;
  std::map<const Obj*, bool> converting_;
  size_t path_bytes_ = 0;
  std::map<std::string, size_t> storage_by_key_;
  std::vector<TorchTensor> records_;  // unnamed; Obj::i of a tensor indexes here
};

Obj* Unpickler::resolve_global(std::string_view module, std::string_view name) {
  for (const auto& a : kAllowed) {
    if (a.module == module && a.name == name) {
      Obj* o = make(Kind::kGlobal);
      o->tag = static_cast<int>(a.global);
      o->dtype = a.dtype;
      o->s = fmt::format("{}.{}", module, name);
      return o;
    }
  }
  std::string shown = fmt::format("{}.{}", module.substr(0, 100), name.substr(0, 100));
  for (char& c : shown)
    if (static_cast<uint8_t>(c) < 0x20 || static_cast<uint8_t>(c) > 0x7e) c = '?';
  if (objects_) {
    Obj* o = make(Kind::kGlobal);
    o->tag = static_cast<int>(Global::kOpaque);
    o->s = shown;
    return o;
  }
  fail("refusing the global '{}': only a PyTorch state dict may be loaded", shown);
}

Obj* Unpickler::call(Obj* fn, Obj* args) {
  const auto& a = args->items;
  switch (static_cast<Global>(fn->tag)) {
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
    case Global::kOpaque:
      break;
  }
  if (objects_) return opaque(fn, args);
  fail("calling '{}' is not allowed", fn->s);
}

Obj* Unpickler::opaque(Obj* fn, Obj* args) {
  Obj* o = make(Kind::kObject);
  o->s = fn->s;
  o->items = args->items;
  return o;
}

Obj* Unpickler::new_object(Obj* cls, Obj* args) {
  if (!objects_) fail("creating an instance of '{}' is not allowed", cls->s);
  return opaque(cls, args);
}

void Unpickler::build(Obj* target, Obj* state) {
  if (objects_ && target->kind == Kind::kObject) {
    target->state = state;
    return;
  }
  // Attributes (a state dict's `_metadata`) carry nothing a loader needs.
  if (target->kind != Kind::kDict && target->kind != Kind::kTensor)
    fail("BUILD on an unsupported value");
}

Shape Unpickler::int_tuple(const Obj* o, std::string_view what) {
  if (o->kind != Kind::kTuple) fail("tensor {} must be a tuple", what);
  if (o->items.size() > limits().max_dims) fail("tensor {} has {} dims", what, o->items.size());
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
  if (p[1]->kind != Kind::kGlobal || p[1]->tag != static_cast<int>(Global::kStorageClass))
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
      log_warning("{}: skipping '{}', which is not a tensor", what(), name);
      continue;
    }
    if (!seen.emplace(name, true).second) fail("tensor '{}' appears twice", name);
    TorchTensor t = records_[static_cast<size_t>(v->i)];
    t.name = name;
    out_.tensors.push_back(std::move(t));
  }
  return std::move(out_);
}

std::shared_ptr<const PyValue> Unpickler::convert(Obj* o, const std::string& path, int depth) {
  if (auto it = converted_.find(o); it != converted_.end()) return it->second;
  if (depth > 200) fail("values nested deeper than 200 at '{}'", path.substr(0, 200));
  // Paths are built for every value reached: bounded in all, against long keys nested.
  path_bytes_ += path.size();
  if (path_bytes_ > (size_t{1} << 28)) fail("value paths of more than 256 MiB in all");
  if (!converting_.emplace(o, true).second)
    fail("the value at '{}' contains itself", path.substr(0, 200));
  auto v = std::make_shared<PyValue>();
  using K = PyValue::Kind;
  auto child = [&](Obj* c, const std::string& key) {
    if (auto it = converted_.find(c); it != converted_.end()) return it->second;
    return convert(c, path.empty() ? key : path + "." + key, depth + 1);
  };
  switch (o->kind) {
    case Kind::kNone:
      v->kind = K::kNone;
      break;
    case Kind::kBool:
      v->kind = K::kBool;
      v->i = o->i;
      break;
    case Kind::kInt:
      v->kind = K::kInt;
      v->i = o->i;
      break;
    case Kind::kFloat:
      v->kind = K::kFloat;
      v->f = o->f;
      break;
    case Kind::kStr:
    case Kind::kBytes:
      v->kind = o->kind == Kind::kStr ? K::kStr : K::kBytes;
      v->s = o->s;
      break;
    case Kind::kTuple:
    case Kind::kList:
    case Kind::kSet:
      v->kind = o->kind == Kind::kTuple ? K::kTuple : o->kind == Kind::kList ? K::kList : K::kSet;
      for (size_t k = 0; k < o->items.size(); ++k)
        v->items.push_back(child(o->items[k], std::to_string(k)));
      break;
    case Kind::kDict:
      v->kind = K::kDict;
      for (size_t k = 0; k + 1 < o->items.size(); k += 2) {
        v->items.push_back(child(o->items[k], "key"));
        v->items.push_back(child(o->items[k + 1], o->items[k]->s));
      }
      break;
    case Kind::kGlobal:
      v->kind = K::kGlobal;
      v->s = o->s;
      break;
    case Kind::kObject:
      v->kind = K::kObject;
      v->s = o->s;
      for (size_t k = 0; k < o->items.size(); ++k)
        v->items.push_back(child(o->items[k], "arg" + std::to_string(k)));
      if (o->state) v->state = child(o->state, "state");
      break;
    case Kind::kStorage:
      fail("a bare storage at '{}'", path.substr(0, 200));
    case Kind::kTensor: {
      v->kind = K::kTensor;
      v->s = path;
      TorchTensor t = records_[static_cast<size_t>(o->i)];
      t.name = path;
      out_.tensors.push_back(std::move(t));
      break;
    }
  }
  converting_.erase(o);
  converted_.emplace(o, v);
  return v;
}

TorchObject Unpickler::unpickle_object() {
  Obj* root = run();
  TorchObject out;
  out.root = convert(root, "", 0);
  std::map<std::string, bool> seen;
  for (const auto& t : out_.tensors)
    if (!seen.emplace(t.name, true).second) fail("tensor '{}' appears twice", t.name);
  out.state = std::move(out_);
  return out;
}

}  // namespace

TorchObject unpickle_torch_object(std::string_view pickle, std::string_view what,
                                  const UnpickleLimits& limits) {
  return Unpickler(pickle, what, limits, true).unpickle_object();
}

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
  return Unpickler(pickle, what, limits, false).unpickle();
}

}  // namespace tachyon
