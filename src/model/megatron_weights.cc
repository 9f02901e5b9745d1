// A Megatron-LM checkpoint's shards merged into one model (model/megatron.h): each
// tensor named canonically, its tensor-parallel pieces concatenated along their split
// dimension (SwiGLU's per-shard [gate; up] de-interleaved), pipeline stages' layers
// renumbered, the padded vocabulary cut, and the result served to load_weights as an
// in-memory checkpoint.
#include <cstring>
#include <map>
#include <optional>

#include "core/error.h"
#include "core/logging.h"
#include "io/torch_file.h"
#include "model/megatron.h"

namespace tachyon {

namespace {

enum class Split : uint8_t { kReplicated, kRows, kCols, kGateUp };

struct Part {
  int layer = -1;  // local layer index; -1: global
  std::string key;
  Split split = Split::kReplicated;
};

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// The canonical name of a tensor of a layer, from its legacy or Megatron-core name
// (after "layers.N."); nullopt when unknown.
std::optional<Part> layer_part(std::string_view rest, bool swiglu) {
  struct Rule {
    std::string_view name, key;
    Split split;
  };
  const Split fc1 = swiglu ? Split::kGateUp : Split::kRows;
  const Rule rules[] = {
      {"input_layernorm.weight", "attn_norm.weight", Split::kReplicated},
      {"input_layernorm.bias", "attn_norm.bias", Split::kReplicated},
      {"self_attention.linear_qkv.layer_norm_weight", "attn_norm.weight", Split::kReplicated},
      {"self_attention.linear_qkv.layer_norm_bias", "attn_norm.bias", Split::kReplicated},
      {"self_attention.query_key_value.weight", "qkv.weight", Split::kRows},
      {"self_attention.query_key_value.bias", "qkv.bias", Split::kRows},
      {"self_attention.linear_qkv.weight", "qkv.weight", Split::kRows},
      {"self_attention.linear_qkv.bias", "qkv.bias", Split::kRows},
      {"self_attention.dense.weight", "o.weight", Split::kCols},
      {"self_attention.dense.bias", "o.bias", Split::kReplicated},
      {"self_attention.linear_proj.weight", "o.weight", Split::kCols},
      {"self_attention.linear_proj.bias", "o.bias", Split::kReplicated},
      {"post_attention_layernorm.weight", "mlp_norm.weight", Split::kReplicated},
      {"post_attention_layernorm.bias", "mlp_norm.bias", Split::kReplicated},
      {"pre_mlp_layernorm.weight", "mlp_norm.weight", Split::kReplicated},
      {"pre_mlp_layernorm.bias", "mlp_norm.bias", Split::kReplicated},
      {"mlp.linear_fc1.layer_norm_weight", "mlp_norm.weight", Split::kReplicated},
      {"mlp.linear_fc1.layer_norm_bias", "mlp_norm.bias", Split::kReplicated},
      {"mlp.dense_h_to_4h.weight", "fc1.weight", fc1},
      {"mlp.dense_h_to_4h.bias", "fc1.bias", fc1},
      {"mlp.linear_fc1.weight", "fc1.weight", fc1},
      {"mlp.linear_fc1.bias", "fc1.bias", fc1},
      {"mlp.dense_4h_to_h.weight", "fc2.weight", Split::kCols},
      {"mlp.dense_4h_to_h.bias", "fc2.bias", Split::kReplicated},
      {"mlp.linear_fc2.weight", "fc2.weight", Split::kCols},
      {"mlp.linear_fc2.bias", "fc2.bias", Split::kReplicated},
  };
  for (const auto& r : rules)
    if (rest == r.name) return Part{0, std::string(r.key), r.split};
  return std::nullopt;
}

// nullopt: not a weight (skipped); throws on an unknown name.
std::optional<Part> classify(const std::string& name, bool swiglu, const std::string& file,
                             const std::string& prefix) {
  std::string_view n = name;
  if (ends_with(n, "._extra_state") || n == "word_embeddings_for_head.weight") return std::nullopt;
  if (starts_with(n, "language_model."))
    n.remove_prefix(std::string_view("language_model.").size());
  for (std::string_view p : {"encoder.layers.", "transformer.layers.", "decoder.layers."}) {
    if (!starts_with(n, p)) continue;
    std::string_view rest = n.substr(p.size());
    const size_t dot = rest.find('.');
    const std::string_view num = rest.substr(0, dot);
    if (dot == rest.npos || num.empty() || num.size() > 6 ||
        num.find_first_not_of("0123456789") != num.npos)
      break;
    std::optional<Part> part = layer_part(rest.substr(dot + 1), swiglu);
    if (!part) break;
    part->layer = std::stoi(std::string(num));
    return part;
  }
  const struct {
    std::string_view name, key;
    Split split;
  } globals[] = {
      {"embedding.word_embeddings.weight", "embedding.weight", Split::kRows},
      {"embedding.position_embeddings.weight", "position_embedding.weight", Split::kReplicated},
      {"encoder.final_layernorm.weight", "final_norm.weight", Split::kReplicated},
      {"encoder.final_layernorm.bias", "final_norm.bias", Split::kReplicated},
      {"encoder.final_norm.weight", "final_norm.weight", Split::kReplicated},
      {"encoder.final_norm.bias", "final_norm.bias", Split::kReplicated},
      {"decoder.final_layernorm.weight", "final_norm.weight", Split::kReplicated},
      {"decoder.final_layernorm.bias", "final_norm.bias", Split::kReplicated},
      {"decoder.final_norm.weight", "final_norm.weight", Split::kReplicated},
      {"decoder.final_norm.bias", "final_norm.bias", Split::kReplicated},
      {"output_layer.weight", "output_layer.weight", Split::kRows},
  };
  for (const auto& g : globals)
    if (n == g.name) return Part{-1, std::string(g.key), g.split};
  raise<InvalidArgument>("{}: unrecognised Megatron tensor '{}{}'", file, prefix, name);
}

// One merged tensor's tensor-parallel pieces.
struct Pieces {
  Split split = Split::kReplicated;
  std::vector<Tensor> by_tp;
  std::vector<std::string> names, files;  // where each piece came from
};

// Concatenates 2-D (or 1-D, rows only) pieces along rows or columns.
Tensor concat(const std::vector<Tensor>& ts, bool rows) {
  const Tensor& a = ts[0];
  Shape shape = a.shape();
  int64_t total = 0;
  for (const Tensor& t : ts) total += rows ? t.dim(0) : t.dim(1);
  shape[rows ? 0 : 1] = total;
  Tensor out = Tensor::empty(shape, a.dtype());
  auto* dst = static_cast<uint8_t*>(out.raw());
  const size_t esz = dtype_size(a.dtype());
  if (rows) {
    for (const Tensor& t : ts) {
      std::memcpy(dst, t.raw(), t.nbytes());
      dst += t.nbytes();
    }
    return out;
  }
  const int64_t n = a.dim(0);
  size_t col = 0;
  for (const Tensor& t : ts) {
    const size_t w = static_cast<size_t>(t.dim(1)) * esz;
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(dst + (static_cast<size_t>(r) * static_cast<size_t>(total)) * esz + col,
                  static_cast<const uint8_t*>(t.raw()) + static_cast<size_t>(r) * w, w);
    col += w;
  }
  return out;
}

Tensor merge(const std::string& key, Pieces& p, int32_t tp) {
  for (int32_t r = 0; r < tp; ++r)
    if (!p.by_tp[r])
      raise<NotFound>("Megatron tensor '{}' ({}) is missing from tensor-parallel rank {}", key,
                      p.names[0], r);
  const Tensor& first = p.by_tp[0];
  for (int32_t r = 1; r < tp; ++r) {
    const Tensor& t = p.by_tp[r];
    if (t.shape() != first.shape() || t.dtype() != first.dtype())
      raise<InvalidArgument>("{}: '{}' is {} where tensor-parallel rank 0 ({}) has {}", p.files[r],
                             p.names[r], t.str(), p.files[0], first.str());
  }
  const bool cols = p.split == Split::kCols;
  if ((cols && first.ndim() != 2) || first.ndim() < 1 || first.ndim() > 2)
    raise<InvalidArgument>("{}: '{}' is {}, not a matrix or vector", p.files[0], p.names[0],
                           first.str());
  switch (p.split) {
    case Split::kReplicated:
      return first;
    case Split::kRows:
      return concat(p.by_tp, true);
    case Split::kCols:
      return concat(p.by_tp, false);
    case Split::kGateUp: {
      if (first.dim(0) % 2 != 0)
        raise<InvalidArgument>("{}: SwiGLU '{}' has an odd row count {}", p.files[0], p.names[0],
                               first.dim(0));
      std::vector<Tensor> halves;
      for (int half = 0; half < 2; ++half)
        for (const Tensor& t : p.by_tp)
          halves.push_back(t.slice_rows(half * t.dim(0) / 2, (half + 1) * t.dim(0) / 2));
      return concat(halves, true);
    }
  }
  return {};
}

class MemorySource : public TensorSource {
 public:
  MemorySource(std::string path, std::map<std::string, Tensor> tensors)
      : path_(std::move(path)), tensors_(std::move(tensors)) {}
  const std::string& path() const override { return path_; }
  std::vector<TensorInfo> tensors() const override {
    std::vector<TensorInfo> out;
    for (const auto& [name, t] : tensors_) out.push_back({name, t.dtype(), t.shape(), path_});
    return out;
  }
  Tensor get(const std::string& name) const override {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) raise<NotFound>("{}: no tensor named '{}'", path_, name);
    return it->second;
  }

 private:
  std::string path_;
  std::map<std::string, Tensor> tensors_;
};

std::shared_ptr<TorchFile> open_shard(const MegatronShard& s) {
  auto f = TorchFile::open_object(s.path);
  if (!f->root()) raise<InvalidArgument>("{}: no checkpoint value", s.path);
  return f;
}

// The shards the args ask for, every one present.
void check_shards(const MegatronLayout& layout, const MegatronArgs& args) {
  for (int32_t p = 0; p < args.pp; ++p)
    for (int32_t t = 0; t < args.tp; ++t)
      if (!layout.find(t, p))
        raise<NotFound>("{}: missing shard {} of tensor x pipeline {} x {}", layout.dir,
                        layout.pipeline_named ? fmt::format("mp_rank_{:02d}_{:03d}", t, p)
                                              : fmt::format("mp_rank_{:02d}", t),
                        args.tp, args.pp);
  for (const auto& s : layout.shards)
    if (s.tp >= args.tp || s.pp >= args.pp)
      raise<InvalidArgument>("{}: shard beyond tensor x pipeline {} x {} (args of {})", s.path,
                             args.tp, args.pp, layout.shards[0].path);
  if (args.pp > 1 && !layout.pipeline_named)
    raise<InvalidArgument>("{}: pipeline size {} but shards named mp_rank_TT", layout.dir, args.pp);
}

// A shard's args must describe the same model as the first shard's.
void same_run(const MegatronArgs& a, const MegatronArgs& b, const std::string& file,
              const TorchFile& first) {
  const ModelConfig &x = a.config, &y = b.config;
  if (a.tp != b.tp || a.pp != b.pp || a.padded_vocab != b.padded_vocab ||
      x.layer_num != y.layer_num || x.hidden_size != y.hidden_size || x.head_num != y.head_num ||
      x.head_num_kv != y.head_num_kv || x.inter_size != y.inter_size || a.swiglu != b.swiglu ||
      a.checkpoint_version != b.checkpoint_version)
    raise<InvalidArgument>("{}: its args describe another model than {}'s", file, first.path());
}

// The shard's state dict entry: "model" (Megatron-LM) or "module" (the
// mp_rank_TT_model_states.pt files of DeepSpeed's Megatron).
std::string model_key(const TorchFile& f) {
  const char* key = f.root()->get("model") || !f.root()->get("module") ? "model" : "module";
  const PyValue* model = f.root()->get(key);
  if (!model || !model->is_dict())
    raise<InvalidArgument>("{}: '{}' is {}, not a state dict", f.path(), key,
                           model ? model->describe() : "absent");
  return key;
}

MegatronArgs read_args(const TorchFile& f, int64_t vocab_size, const std::string& dir) {
  MegatronArgs args = read_megatron_args(*f.root(), f.path());
  args.config.vocab_size = megatron_vocab(args, vocab_size, dir);
  return args;
}

}  // namespace

ModelConfig load_megatron_config(const std::string& dir, int64_t vocab_size) {
  const MegatronLayout layout = find_megatron_layout(dir);
  return read_args(*open_shard(layout.shards[0]), vocab_size, dir).config;
}

MegatronModel load_megatron(const std::string& dir, int64_t vocab_size) {
  const MegatronLayout layout = find_megatron_layout(dir);
  auto first = open_shard(layout.shards[0]);
  const MegatronArgs args = read_args(*first, vocab_size, dir);
  model_key(*first);
  check_shards(layout, args);
  const ModelConfig& mc = args.config;
  const int32_t per_stage = mc.layer_num / args.pp;
  std::map<std::string, Pieces> parts;
  for (const auto& shard : layout.shards) {
    auto f = shard.tp == 0 && shard.pp == 0 ? first : open_shard(shard);
    if (f != first) same_run(args, read_megatron_args(*f->root(), f->path()), f->path(), *first);
    const std::string prefix = model_key(*f) + ".";
    for (const auto& t : f->tensors()) {
      if (!starts_with(t.name, prefix)) continue;
      const std::string name = t.name.substr(prefix.size());
      std::optional<Part> part = classify(name, args.swiglu, f->path(), prefix);
      if (!part) continue;
      std::string key = part->key;
      if (part->layer >= 0) {
        if (part->layer >= per_stage)
          raise<InvalidArgument>("{}: layer {} of a stage of {} layers ('{}{}')", f->path(),
                                 part->layer, per_stage, prefix, name);
        key = fmt::format("layers.{}.{}", shard.pp * per_stage + part->layer, key);
      }
      Pieces& p = parts[key];
      p.split = part->split;
      p.by_tp.resize(static_cast<size_t>(args.tp));
      p.names.resize(static_cast<size_t>(args.tp));
      p.files.resize(static_cast<size_t>(args.tp));
      if (p.by_tp[shard.tp]) {
        // Another stage's copy of the word embeddings or the output layer (a tied
        // model keeps one next to its head): the first one read is kept.
        if (key == "embedding.weight" || key == "output_layer.weight") continue;
        raise<InvalidArgument>("{}: '{}{}' appears twice for tensor rank {}", f->path(), prefix,
                               name, shard.tp);
      }
      Tensor v = f->get(t.name);
      if (part->key == "qkv.weight" || part->key == "qkv.bias")
        if (args.checkpoint_version < 2)
          v = megatron_qkv_to_v2(v, args.checkpoint_version, mc.head_num / args.tp,
                                 mc.size_per_head);
      p.by_tp[shard.tp] = std::move(v);
      p.names[shard.tp] = prefix + name;
      p.files[shard.tp] = f->path();
    }
  }
  std::map<std::string, Tensor> merged;
  for (auto& [key, p] : parts) {
    Tensor t = merge(key, p, args.tp);
    if (key == "embedding.weight" || key == "output_layer.weight") {
      if (t.dim(0) != args.padded_vocab)
        raise<InvalidArgument>("{}: '{}' has {} rows, not the padded vocabulary of {}", p.files[0],
                               p.names[0], t.dim(0), args.padded_vocab);
      if (mc.vocab_size < t.dim(0)) t = t.slice_rows(0, mc.vocab_size).clone();
    }
    merged.emplace(key, std::move(t));
  }
  std::vector<std::unique_ptr<TensorSource>> sources;
  sources.push_back(std::make_unique<MemorySource>(layout.dir, std::move(merged)));
  MegatronModel out;
  out.config = mc;
  out.checkpoint = Checkpoint::from_sources(std::move(sources));
  out.map = megatron_weight_map(mc);
  return out;
}

WeightMap megatron_weight_map(const ModelConfig& mc) {
  const std::string l = "layers.{L}.";
  const auto grouped = WeightTransform::kQkvGrouped;
  WeightMap m = {
      {Slot::kEmbedding, {"embedding.weight"}},  {Slot::kAttnNorm, {l + "attn_norm.weight"}},
      {Slot::kQkv, {l + "qkv.weight", grouped}}, {Slot::kO, {l + "o.weight"}},
      {Slot::kMlpNorm, {l + "mlp_norm.weight"}}, {Slot::kDown, {l + "fc2.weight"}},
      {Slot::kFinalNorm, {"final_norm.weight"}},
  };
  if (mc.position == PositionType::kLearned) m[Slot::kPosEmbedding] = {"position_embedding.weight"};
  if (mc.norm_type == NormType::kLayerNorm) {
    m[Slot::kAttnNormBias] = {l + "attn_norm.bias"};
    m[Slot::kMlpNormBias] = {l + "mlp_norm.bias"};
    m[Slot::kFinalNormBias] = {"final_norm.bias"};
  }
  if (mc.gated_mlp) {
    m[Slot::kGateUp] = {l + "fc1.weight"};
  } else {
    m[Slot::kUp] = {l + "fc1.weight"};
  }
  if (mc.qkv_bias) m[Slot::kQkvBias] = {l + "qkv.bias", grouped};
  if (mc.o_bias) m[Slot::kOBias] = {l + "o.bias"};
  if (mc.mlp_bias) {
    m[mc.gated_mlp ? Slot::kGateBias : Slot::kUpBias] = {l + "fc1.bias"};
    m[Slot::kDownBias] = {l + "fc2.bias"};
  }
  if (!mc.tie_word_embeddings) m[Slot::kLmHead] = {"output_layer.weight"};
  return m;
}

Tensor megatron_qkv_to_v2(const Tensor& t, double version, int32_t heads, int32_t head_dim) {
  if (version >= 2) return t;
  const int64_t rows = int64_t{heads} * 3 * head_dim;
  if (t.ndim() < 1 || t.dim(0) != rows)
    raise<InvalidArgument>("a version {} qkv shard of {} rows for {} heads of {}", version,
                           t.ndim() ? t.dim(0) : 0, heads, head_dim);
  const Tensor c = t.clone();
  Tensor out = Tensor::empty(c.shape(), c.dtype());
  const size_t rb = c.nbytes() / static_cast<size_t>(rows);
  const auto* src = static_cast<const uint8_t*>(c.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t w = 0; w < 3; ++w)
      for (int64_t d = 0; d < head_dim; ++d) {
        // Destination row [h][w][d]; its source by version.
        const int64_t from = version < 1 ? (w * heads + h) * head_dim + d  // [w][h][d]
                                         : (h * head_dim + d) * 3 + w;     // [h][d][w]
        std::memcpy(dst + static_cast<size_t>((h * 3 + w) * head_dim + d) * rb,
                    src + static_cast<size_t>(from) * rb, rb);
      }
  return out;
}

}  // namespace tachyon
