// A restricted unpickler for the `data.pkl` of a zip-format torch.save file holding a
// state dict. It understands only the opcodes and globals a state dict needs
// (OrderedDict, _rebuild_tensor(_v2), _rebuild_parameter, the typed Storage classes);
// any other global is refused by name. Nothing in the pickle is ever executed: the
// result is plain records describing tensors and the storages they view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "io/py_value.h"

namespace tachyon {

struct TorchStorage {
  std::string key;  // the entry `<archive>/data/<key>` holds its bytes
  DType dtype = DType::kF32;
  int64_t numel = 0;  // elements, as declared by the pickle
};

struct TorchTensor {
  std::string name;
  size_t storage = 0;          // index into TorchStateDict::storages
  int64_t storage_offset = 0;  // in elements
  Shape shape;
  Shape stride;  // in elements
};

struct TorchStateDict {
  std::vector<TorchStorage> storages;
  std::vector<TorchTensor> tensors;  // in pickle order
};

struct UnpickleLimits {
  // A state dict takes ~30 opcodes, ~20 values and ~15 container items per tensor.
  uint64_t max_ops = uint64_t{1} << 25;  // opcodes executed
  size_t max_stack = size_t{1} << 20;    // values on the stack
  size_t max_marks = 1024;               // nesting of MARKs
  size_t max_memo = size_t{1} << 22;     // memo index bound
  size_t max_objects = size_t{1} << 22;  // values created
  size_t max_items = size_t{1} << 24;    // items put in tuples, lists and dicts
  size_t max_dims = 64;                  // tensor rank
};

// Runs the restricted unpickler. Every tensor's extent is checked against its
// storage's declared numel (overflow-checked). Throws InvalidArgument naming `what`,
// the offset in the pickle and, for a refused global, its dotted name.
TorchStateDict unpickle_torch_state_dict(std::string_view pickle, std::string_view what,
                                         const UnpickleLimits& limits = {});

// Any object torch.save wrote (a training checkpoint: a dict of arguments, counters,
// RNG states and a nested state dict), read as data. The tensor machinery keeps its
// meaning; every other global is an opaque name, and a call or instance of one an opaque
// PyValue::kObject: nothing is ever imported or run. Each tensor is named by its path
// from the root, keys and list indices joined by '.' ("model.decoder.layers.0.x.weight").
struct TorchObject {
  TorchStateDict state;  // the storages and every tensor, named by path
  std::shared_ptr<const PyValue> root;
};
TorchObject unpickle_torch_object(std::string_view pickle, std::string_view what,
                                  const UnpickleLimits& limits = {});

// Whether `stride` is the row-major (contiguous) stride of `shape`; dims of size 1
// may carry any stride.
bool is_contiguous(const Shape& shape, const Shape& stride);

}  // namespace tachyon
