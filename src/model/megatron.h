// Megatron-LM training checkpoints, loaded as they come out of training:
//
//   RUN/latest_checkpointed_iteration.txt     "release" or an iteration number N
//   RUN/iter_000000N/ or RUN/release/         the iteration folder (also given itself)
//     mp_rank_TT/model_optim_rng.pt           tensor-parallel shards, or
//     mp_rank_TT_PPP/model_optim_rng.pt       tensor x pipeline shards
//                                             (model_rng.pt also; mp_rank_TT_model_states.pt
//                                             files directly in the folder)
//
// Each shard is a torch.save'd dict read as data (io/torch_pickle.h's
// unpickle_torch_object: nothing in it is run): "args" (the run's argparse.Namespace,
// which gives the hyper-parameters), "checkpoint_version", and "model" (legacy nested
// names under language_model, or Megatron-core's flat names). The shards are merged
// into one model in memory (megatron_weights.cc) and loaded through the ordinary
// weight mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/py_value.h"
#include "model/config.h"
#include "model/weights.h"

namespace tachyon {

struct MegatronShard {
  int32_t tp = 0, pp = 0;
  std::string path;
};

struct MegatronLayout {
  std::string dir;                    // the iteration folder
  bool pipeline_named = false;        // mp_rank_TT_PPP folders
  std::vector<MegatronShard> shards;  // sorted by (pp, tp)
  // nullptr when absent.
  const MegatronShard* find(int32_t tp, int32_t pp) const;
};

// Whether `dir` loads as a Megatron-LM checkpoint: a folder without config.json that is
// a run folder (latest_checkpointed_iteration.txt) or an iteration folder holding
// mp_rank_* shards.
bool is_megatron_checkpoint(const std::string& dir);
// The iteration folder and its shards. Throws NotFound / InvalidArgument naming the
// folder or file.
MegatronLayout find_megatron_layout(const std::string& dir);

// What a shard's "args" say.
struct MegatronArgs {
  ModelConfig config;  // vocab_size: the padded vocabulary
  int32_t tp = 1, pp = 1;
  int64_t padded_vocab = 0;
  double checkpoint_version = 0;
  bool swiglu = false;
};
// Reads the hyper-parameters of shard `file` from its root value. Throws
// InvalidArgument naming the file and the field: a missing required argument, a value
// of the wrong type (an opaque call where a number belongs), a feature not supported.
MegatronArgs read_megatron_args(const PyValue& root, const std::string& file);

// The vocabulary size the model keeps: vocab_size (the tokenizer's; 0: unknown) when
// it is given and below the padded size, else the padded size. Throws InvalidArgument
// when vocab_size exceeds the padded vocabulary.
int64_t megatron_vocab(const MegatronArgs& args, int64_t vocab_size, const std::string& dir);

struct MegatronModel {
  ModelConfig config;
  std::unique_ptr<Checkpoint> checkpoint;  // the merged tensors, in memory
  WeightMap map;
};

// The mapped config (from the first shard alone).
ModelConfig load_megatron_config(const std::string& dir, int64_t vocab_size = 0);
// Every shard, merged: the config, the tensors under the names of megatron_weight_map.
MegatronModel load_megatron(const std::string& dir, int64_t vocab_size = 0);
// The slot -> merged tensor names.
WeightMap megatron_weight_map(const ModelConfig& cfg);

// The fused qkv rows of one tensor-parallel shard of an older checkpoint_version put
// in the version-2 order [head][q, k, v][head dim] (multi-head attention): version 0
// stores [q, k, v][head][head dim], version 1 [head][head dim][q, k, v].
Tensor megatron_qkv_to_v2(const Tensor& t, double version, int32_t heads, int32_t head_dim);

}  // namespace tachyon
