// The checkpoint facade every model load goes through: a folder of weights in any of
// the layouts found on the Hugging Face hub, seen as one name -> tensor map.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/tensor_source.h"

namespace tachyon {

class Checkpoint {
 public:
  // Opens a model directory, in this order of preference: *.safetensors.index.json
  // (sharded; model.safetensors.index.json first), model.safetensors, shards named
  // *-NNNNN-of-NNNNN.safetensors without an index, pytorch_model.bin.index.json,
  // pytorch_model.bin, *-NNNNN-of-NNNNN.bin shards, then every *.safetensors file.
  // A path to one weights file opens just that file. Throws NotFound (no weights,
  // missing shard — naming the file) / InvalidArgument (corrupt file or index —
  // naming the file and the tensor).
  static std::unique_ptr<Checkpoint> open(const std::string& dir);
  // Opens exactly these weights files (no index). Tensor names must be unique.
  static std::unique_ptr<Checkpoint> open_files(const std::vector<std::string>& files);
  // A checkpoint over sources opened otherwise (a training layout's merged tensors).
  static std::unique_ptr<Checkpoint> from_sources(
      std::vector<std::unique_ptr<TensorSource>> sources);

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  // Throws NotFound naming the tensor.
  const TensorInfo& info(const std::string& name) const;
  // A CPU tensor: a zero-copy view of the mapped file where the layout allows (the
  // tensor keeps the mapping alive), else a contiguous copy. Throws NotFound.
  Tensor get(const std::string& name) const;
  // Sum of every tensor's size in bytes.
  uint64_t total_bytes() const;
  // The weights files, in the order opened.
  std::vector<std::string> files() const;

 private:
  struct Entry {
    TensorInfo info;
    const TensorSource* source = nullptr;
  };
  void add_source(std::unique_ptr<TensorSource> source);

  std::vector<std::unique_ptr<TensorSource>> sources_;
  std::map<std::string, Entry> entries_;
};

}  // namespace tachyon
