// A zip-format PyTorch checkpoint (what torch.save writes since 1.6, e.g.
// pytorch_model.bin): `<archive>/data.pkl` holds the state dict, read by the
// restricted unpickler, and `<archive>/data/<key>` the raw little-endian storages,
// which tensors view without a copy when they are contiguous.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/torch_pickle.h"
#include "io/zip.h"

namespace tachyon {

class TorchFile {
 public:
  // Maps and validates the file. Throws NotFound / InvalidArgument naming the path.
  static std::shared_ptr<TorchFile> open(const std::string& path);
  // The same from an image in memory that `owner` keeps alive; `what` names it.
  static std::shared_ptr<TorchFile> parse(const uint8_t* data, size_t size,
                                          std::shared_ptr<void> owner, std::string what);
  // Any object torch.save wrote (a training checkpoint), read as data by
  // unpickle_torch_object: its tensors are named by their path from the root.
  static std::shared_ptr<TorchFile> open_object(const std::string& path);
  static std::shared_ptr<TorchFile> parse_object(const uint8_t* data, size_t size,
                                                 std::shared_ptr<void> owner, std::string what);

  // The object's values (open_object / parse_object); nullptr for a state dict.
  const PyValue* root() const { return root_.get(); }

  const std::string& path() const { return what_; }
  const std::vector<TorchTensor>& tensors() const { return state_.tensors; }
  DType dtype(const TorchTensor& t) const { return state_.storages[t.storage].dtype; }
  // nullptr when absent.
  const TorchTensor* find(const std::string& name) const;
  // A contiguous CPU tensor: a view of the mapping when the layout allows, else a
  // copy (strided or misaligned data). Throws NotFound naming the tensor.
  Tensor get(const std::string& name) const;

 private:
  TorchFile() = default;
  void load(const uint8_t* data, size_t size, bool object);
  Tensor gather(const TorchTensor& t) const;

  std::string what_;
  std::shared_ptr<void> owner_;
  std::unique_ptr<ZipReader> zip_;
  TorchStateDict state_;
  std::shared_ptr<const PyValue> root_;
  std::vector<std::span<const uint8_t>> storage_bytes_;  // per storage
  std::map<std::string, size_t> index_;
};

}  // namespace tachyon
