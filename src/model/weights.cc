#include "model/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/logging.h"
#include "io/checkpoint.h"
#include "model/quant_formats.h"

namespace tachyon {

std::string_view slot_name(Slot slot) {
  static constexpr std::string_view kNames[] = {
      "embedding",       "pos_embedding",
      "embed_norm",      "embed_norm_bias",
      "project_in",      "project_out",
      "final_norm",      "final_norm_bias",
      "lm_head",         "lm_head_bias",
      "attn_norm",       "attn_norm_bias",
      "mlp_norm",        "mlp_norm_bias",
      "post_attn_norm",  "post_mlp_norm",
      "q_norm",          "k_norm",
      "attn_qkv",        "attn_qkv_bias",
      "attn_q",          "attn_q_bias",
      "attn_k",          "attn_k_bias",
      "attn_v",          "attn_v_bias",
      "attn_o",          "attn_o_bias",
      "ffn_gate_up",     "ffn_gate",
      "ffn_gate_bias",   "ffn_up",
      "ffn_up_bias",     "ffn_down",
      "ffn_down_bias",   "moe_router",
      "expert_gate",     "expert_up",
      "expert_gate_up",  "expert_down",
      "experts_gate_up", "experts_down",
      "shared_gate",     "shared_up",
      "shared_down",     "shared_expert_gate",
      "linear_attn",     "linear_mlp",
  };
  static_assert(std::size(kNames) == static_cast<size_t>(Slot::kCount));
  return kNames[static_cast<size_t>(slot)];
}

Tensor transpose_2d(const Tensor& t) {
  TACHYON_CHECK(t.ndim() == 2, "transpose of {}", t.str());
  const int64_t r = t.dim(0), c = t.dim(1);
  const size_t es = dtype_size(t.dtype());
  Tensor out = Tensor::empty({c, r}, t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) std::memcpy(dst + (j * r + i) * es, src + (i * c + j) * es, es);
  return out;
}

namespace {

// Copies rows: out row (dst_first + i) <- in row (src_first + i) for i < count, rows of
// `row_bytes` bytes.
void copy_rows(const Tensor& in, Tensor& out, int64_t src_first, int64_t dst_first, int64_t count,
               size_t row_bytes) {
  std::memcpy(static_cast<uint8_t*>(out.raw()) + dst_first * row_bytes,
              static_cast<const uint8_t*>(in.raw()) + src_first * row_bytes, count * row_bytes);
}

size_t row_bytes_of(const Tensor& t) {
  return t.ndim() == 1 ? dtype_size(t.dtype())
                       : static_cast<size_t>(t.dim(1)) * dtype_size(t.dtype());
}

}  // namespace

Tensor reorder_qkv_per_head(const Tensor& t, int32_t heads, int32_t head_dim) {
  TACHYON_CHECK(t.dim(0) == int64_t{3} * heads * head_dim, "per-head qkv {} for {} heads", t.str(),
                heads);
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  const size_t rb = row_bytes_of(t);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t part = 0; part < 3; ++part)
      copy_rows(t, out, (h * 3 + part) * head_dim, (part * heads + h) * head_dim, head_dim, rb);
  return out;
}

Tensor reorder_qkv_grouped(const Tensor& t, int32_t kv_heads, int32_t group, int32_t head_dim) {
  const int64_t per_kv = int64_t{group} + 2;
  TACHYON_CHECK(t.dim(0) == kv_heads * per_kv * head_dim, "grouped qkv {} for {} kv heads x {}",
                t.str(), kv_heads, group);
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  const size_t rb = row_bytes_of(t);
  const int64_t q_rows = int64_t{kv_heads} * group * head_dim;
  const int64_t kv_rows = int64_t{kv_heads} * head_dim;
  for (int64_t g = 0; g < kv_heads; ++g) {
    const int64_t src = g * per_kv * head_dim;
    copy_rows(t, out, src, g * group * head_dim, int64_t{group} * head_dim, rb);
    copy_rows(t, out, src + int64_t{group} * head_dim, q_rows + g * head_dim, head_dim, rb);
    copy_rows(t, out, src + (int64_t{group} + 1) * head_dim, q_rows + kv_rows + g * head_dim,
              head_dim, rb);
  }
  return out;
}

Tensor normalize_rows(const Tensor& t) {
  TACHYON_CHECK(t.ndim() == 2, "normalize_rows of {}", t.str());
  const int64_t rows = t.dim(0), cols = t.dim(1);
  Tensor in = t.dtype() == DType::kF32 ? t : t.to(DType::kF32);
  Tensor out = Tensor::empty({rows, cols}, DType::kF32);
  const float* src = in.data<float>();
  float* dst = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += double{src[r * cols + c]} * src[r * cols + c];
    const double denom = std::max(std::sqrt(sum), 1e-12);
    for (int64_t c = 0; c < cols; ++c)
      dst[r * cols + c] = static_cast<float>(src[r * cols + c] / denom);
  }
  return t.dtype() == DType::kF32 ? out : out.to(t.dtype());
}

Shape slot_shape(const ModelConfig& cfg, Slot s, int layer) {
  const int l = std::max(layer, 0);
  const int64_t D = cfg.hidden_size, E = cfg.embed_dim(), V = cfg.vocab_size,
                hd = cfg.size_per_head;
  const int64_t q = cfg.q_size(l), kv = cfg.kv_size(l);
  const int64_t I = cfg.inter(l), Ie = cfg.moe.inter_size, Is = cfg.moe.shared_inter_size;
  switch (s) {
    case Slot::kEmbedding:
      return {V, E};
    case Slot::kPosEmbedding:
      return {cfg.max_seq_len + cfg.learned_pos_offset, D};
    case Slot::kProjectIn:
      return {D, E};
    case Slot::kProjectOut:
      return {E, D};
    case Slot::kLmHead:
      return {V, E};
    case Slot::kLmHeadBias:
      return {V};
    case Slot::kQNorm:
    case Slot::kKNorm:
      return {hd};
    case Slot::kQkv:
      return {q + 2 * kv, D};
    case Slot::kQkvBias:
      return {q + 2 * kv};
    case Slot::kQ:
      return {q, D};
    case Slot::kQBias:
      return {q};
    case Slot::kK:
    case Slot::kV:
      return {kv, D};
    case Slot::kKBias:
    case Slot::kVBias:
      return {kv};
    case Slot::kO:
      return {D, q};
    case Slot::kGateUp:
      return {2 * I, D};
    case Slot::kGate:
    case Slot::kUp:
      return {I, D};
    case Slot::kGateBias:
    case Slot::kUpBias:
      return {I};
    case Slot::kDown:
      return {D, I};
    case Slot::kRouter:
      return {cfg.moe.num_experts, D};
    case Slot::kExpertGate:
    case Slot::kExpertUp:
      return {Ie, D};
    case Slot::kExpertGateUp:
      return {2 * Ie, D};
    case Slot::kExpertDown:
      return {D, Ie};
    case Slot::kExpertsGateUp:
      return {cfg.moe.num_experts, 2 * Ie, D};
    case Slot::kExpertsDown:
      return {cfg.moe.num_experts, D, Ie};
    case Slot::kSharedGate:
    case Slot::kSharedUp:
      return {Is, D};
    case Slot::kSharedDown:
      return {D, Is};
    case Slot::kSharedExpertGate:
      return {1, D};
    case Slot::kLinearAttn:
    case Slot::kLinearMlp:
      return {D, D};
    default:
      return {D};  // norms, norm biases, o / down biases
  }
}

bool slot_present(const ModelConfig& cfg, Slot s, int layer) {
  switch (s) {
    case Slot::kAttnNorm:
    case Slot::kAttnNormBias:
      return cfg.has_attention(layer) || cfg.linear_attention(layer);
    case Slot::kLinearAttn:
      return cfg.linear_attention(layer);
    case Slot::kLinearMlp:
      return cfg.linear_mlp(layer);
    case Slot::kMlpNorm:
    case Slot::kMlpNormBias:
      return cfg.has_mlp(layer) || cfg.linear_mlp(layer);
    case Slot::kPostAttnNorm:
    case Slot::kQNorm:
    case Slot::kKNorm:
    case Slot::kQkv:
    case Slot::kQkvBias:
    case Slot::kQ:
    case Slot::kQBias:
    case Slot::kK:
    case Slot::kKBias:
    case Slot::kV:
    case Slot::kVBias:
    case Slot::kO:
    case Slot::kOBias:
      return cfg.has_attention(layer);
    case Slot::kPostMlpNorm:
    case Slot::kGateUp:
    case Slot::kGate:
    case Slot::kGateBias:
    case Slot::kUp:
    case Slot::kUpBias:
    case Slot::kDown:
    case Slot::kDownBias:
      return cfg.has_mlp(layer);
    default:
      return true;
  }
}

namespace {

std::string substitute(std::string name, int layer, int expert) {
  auto replace = [&](const std::string& key, int v) {
    for (size_t p = name.find(key); p != std::string::npos; p = name.find(key))
      name.replace(p, key.size(), std::to_string(v));
  };
  if (layer >= 0) replace("{L}", layer);
  if (expert >= 0) replace("{E}", expert);
  return name;
}

bool is_vector_slot(Slot s) {
  switch (s) {
    case Slot::kEmbedNorm:
    case Slot::kEmbedNormBias:
    case Slot::kFinalNorm:
    case Slot::kFinalNormBias:
    case Slot::kLmHeadBias:
    case Slot::kAttnNorm:
    case Slot::kAttnNormBias:
    case Slot::kMlpNorm:
    case Slot::kMlpNormBias:
    case Slot::kPostAttnNorm:
    case Slot::kPostMlpNorm:
    case Slot::kQNorm:
    case Slot::kKNorm:
    case Slot::kQkvBias:
    case Slot::kQBias:
    case Slot::kKBias:
    case Slot::kVBias:
    case Slot::kOBias:
    case Slot::kGateBias:
    case Slot::kUpBias:
    case Slot::kDownBias:
      return true;
    default:
      return false;
  }
}

class Loader {
 public:
  Loader(const Checkpoint& ckpt, const ModelConfig& cfg, const WeightMap& map, ModelWeights& out)
      : ckpt_(ckpt), cfg_(cfg), map_(map), out_(out) {}

  bool mapped(Slot s) const { return map_.count(s) > 0; }

  Shape expected(Slot s, int layer) const { return slot_shape(cfg_, s, layer); }

  // The checkpoint name of a reference (its spellings in order, each also without the
  // wrapper prefix, as hub checkpoints saved from the base model have it); empty when
  // none is present.
  std::string resolve(const WeightRef& ref, int layer, int expert) const {
    std::vector<std::string> names = {ref.name};
    names.insert(names.end(), ref.alternatives.begin(), ref.alternatives.end());
    for (const std::string& pattern : names) {
      const std::string name = substitute(pattern, layer, expert);
      if (ckpt_.contains(name)) return name;
      const size_t dot = name.find('.');
      if (dot != std::string::npos && ckpt_.contains(name.substr(dot + 1)))
        return name.substr(dot + 1);
    }
    return {};
  }

  bool present(Slot s, int layer, int expert) const {
    auto it = map_.find(s);
    return it != map_.end() && !resolve(it->second, layer, expert).empty();
  }

  // A loaded slot's name in the records: "embedding", "layers.3.attn_qkv",
  // "layers.3.experts.5.expert_down".
  static std::string record_name(Slot s, int layer, int expert) {
    if (expert >= 0) return fmt::format("layers.{}.experts.{}.{}", layer, expert, slot_name(s));
    if (layer >= 0) return fmt::format("layers.{}.{}", layer, slot_name(s));
    return std::string(slot_name(s));
  }

  // The quantized form of a matrix slot (a typed view, core/quant.h) when the checkpoint
  // stores the slot's module quantized; empty otherwise.
  Tensor fetch_quantized(Slot s, const WeightRef& ref, int layer, int expert) {
    const Shape want = expected(s, layer);
    if (!cfg_.quant.enabled() || want.size() != 2 || s == Slot::kEmbedding ||
        s == Slot::kPosEmbedding)
      return {};
    const TensorLookup lookup = [this](const std::string& name) {
      return ckpt_.contains(name) ? ckpt_.get(name) : Tensor{};
    };
    std::vector<std::string> names = {ref.name};
    names.insert(names.end(), ref.alternatives.begin(), ref.alternatives.end());
    static constexpr std::string_view kSuffix = ".weight";
    for (const std::string& pattern : names) {
      const std::string name = substitute(pattern, layer, expert);
      if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) continue;
      std::string module = name.substr(0, name.size() - kSuffix.size());
      if (!has_quantized_tensors(cfg_.quant, module, lookup)) {
        const size_t dot = module.find('.');
        if (dot == std::string::npos ||
            !has_quantized_tensors(cfg_.quant, module.substr(dot + 1), lookup))
          continue;
        module = module.substr(dot + 1);
      }
      if (ref.transform != WeightTransform::kNone)
        raise<InvalidArgument>(
            "quantized module '{}' (slot {}): its weight needs a layout transform, which "
            "quantized weights do not support",
            module, slot_name(s));
      std::shared_ptr<const QuantizedMatrix> m =
          read_quantized(cfg_.quant, module, want[0], want[1], lookup);
      const std::string slot = record_name(s, layer, expert);
      std::string storage = m->str();
      storage = storage.substr(0, storage.rfind(" ["));
      out_.records.push_back({slot, module,
                              m->scheme == QuantScheme::kFp8 ? DType::kF8E4M3 : DType::kU8, want,
                              "", storage, m->nbytes()});
      out_.total_params += static_cast<uint64_t>(m->n * m->k);
      out_.total_bytes += m->nbytes();
      return quantized_view(std::move(m));
    }
    return {};
  }

  // Fetches, checks and transforms one slot; empty when unmapped or optional+missing.
  Tensor fetch(Slot s, int layer = -1, int expert = -1) {
    auto it = map_.find(s);
    if (it == map_.end()) return {};
    const WeightRef& ref = it->second;
    if (Tensor q = fetch_quantized(s, ref, layer, expert)) return q;
    std::string name = resolve(ref, layer, expert);
    if (name.empty()) {
      if (ref.optional) return {};
      raise<NotFound>("checkpoint has no tensor '{}' (slot {}{})",
                      substitute(ref.name, layer, expert), slot_name(s),
                      layer >= 0 ? fmt::format(", layer {}", layer) : std::string());
    }
    const TensorInfo& info = ckpt_.info(name);
    if (!(info.dtype == DType::kF32 || info.dtype == DType::kF16 || info.dtype == DType::kBF16))
      raise<InvalidArgument>("tensor '{}' has dtype {}; supported: f32, f16, bf16", name,
                             dtype_name(info.dtype));
    Shape want = expected(s, layer);
    if (s == Slot::kPosEmbedding) {
      if (info.shape.size() != 2 || info.shape[1] != want[1] || info.shape[0] < want[0])
        raise<InvalidArgument>("tensor '{}' has shape {}; expected [>= {}, {}]", name,
                               shape_str(info.shape), want[0], want[1]);
    } else {
      Shape stored = want;
      if (ref.transform == WeightTransform::kTranspose && want.size() == 2)
        stored = {want[1], want[0]};
      if (info.shape != stored)
        raise<InvalidArgument>("tensor '{}' has shape {}; the config implies {}", name,
                               shape_str(info.shape), shape_str(stored));
    }
    Tensor t = ckpt_.get(name);
    std::string transform;
    switch (ref.transform) {
      case WeightTransform::kNone:
        break;
      case WeightTransform::kTranspose:
        if (t.ndim() == 2) {
          t = transpose_2d(t);
          transform = "transpose";
        }
        break;
      case WeightTransform::kQkvPerHead:
        t = reorder_qkv_per_head(t, cfg_.heads(std::max(layer, 0)), cfg_.size_per_head);
        transform = "qkv per-head -> [q; k; v]";
        break;
      case WeightTransform::kQkvGrouped:
        t = reorder_qkv_grouped(t, cfg_.kv_heads(std::max(layer, 0)),
                                cfg_.heads(std::max(layer, 0)) / cfg_.kv_heads(std::max(layer, 0)),
                                cfg_.size_per_head);
        transform = "qkv grouped -> [q; k; v]";
        break;
      case WeightTransform::kNormalizeRows:
        t = normalize_rows(t);
        transform = "rows normalised";
        break;
    }
    if (is_vector_slot(s) && t.dtype() != DType::kF32) {
      t = t.to(DType::kF32);
      transform += transform.empty() ? "to f32" : ", to f32";
    }
    const std::string slot = record_name(s, layer, expert);
    const uint64_t bytes = static_cast<uint64_t>(shape_numel(info.shape)) * dtype_size(info.dtype);
    out_.records.push_back({slot, name, info.dtype, info.shape, transform,
                            std::string(dtype_name(info.dtype)), bytes});
    out_.total_params += static_cast<uint64_t>(shape_numel(info.shape));
    out_.total_bytes += bytes;
    return t;
  }

  Tensor require(Slot s, int layer = -1) {
    Tensor t = fetch(s, layer);
    if (!t)
      raise<InvalidArgument>("the weight mapping of {} has no tensor for slot {}", cfg_.family,
                             slot_name(s));
    return t;
  }

  NormParams norm(Slot w, Slot b, int layer, bool required = true) {
    NormParams p;
    p.type = cfg_.norm_type;
    p.eps = static_cast<float>(cfg_.norm_eps);
    p.weight_offset = cfg_.norm_weight_offset;
    p.weight = required ? require(w, layer) : fetch(w, layer);
    p.bias = fetch(b, layer);
    return p;
  }

  LinearWeights linear(Slot w, Slot b, int layer) { return {fetch(w, layer), fetch(b, layer)}; }

 private:
  const Checkpoint& ckpt_;
  const ModelConfig& cfg_;
  const WeightMap& map_;
  ModelWeights& out_;
};

}  // namespace

ModelWeights load_weights(const Checkpoint& ckpt, const ModelConfig& cfg, const WeightMap& map) {
  ModelWeights w;
  w.map = map;
  Loader ld(ckpt, cfg, map, w);
  w.embedding = ld.require(Slot::kEmbedding);
  if (cfg.position == PositionType::kLearned) w.pos_embedding = ld.require(Slot::kPosEmbedding);
  if (cfg.embedding_norm) w.embed_norm = ld.norm(Slot::kEmbedNorm, Slot::kEmbedNormBias, -1);
  if (cfg.word_embed_proj_dim > 0) {
    w.project_in = {ld.require(Slot::kProjectIn), {}};
    w.project_out = {ld.require(Slot::kProjectOut), {}};
  }
  if (cfg.final_norm) w.final_norm = ld.norm(Slot::kFinalNorm, Slot::kFinalNormBias, -1);
  if (!cfg.tie_word_embeddings) w.lm_head.w = ld.fetch(Slot::kLmHead);
  if (!w.lm_head.w) {
    if (!cfg.tie_word_embeddings)
      log_info("no lm_head weight in the checkpoint: using the tied embedding");
    w.lm_head.w = w.embedding;
  }
  if (cfg.lm_head_bias) w.lm_head.b = ld.fetch(Slot::kLmHeadBias);

  w.layers.resize(static_cast<size_t>(cfg.layer_num));
  for (int l = 0; l < cfg.layer_num; ++l) {
    LayerWeights& L = w.layers[l];
    // A pruned layer's absent attention or MLP has no weights, its norm included.
    const bool attention = cfg.has_attention(l), mlp = cfg.has_mlp(l);
    if (attention || cfg.linear_attention(l))
      L.attn_norm = ld.norm(Slot::kAttnNorm, Slot::kAttnNormBias, l);
    const bool separate_mlp_norm = !(cfg.parallel_residual && cfg.parallel_shared_norm);
    if (separate_mlp_norm && (mlp || cfg.linear_mlp(l)))
      L.mlp_norm = ld.norm(Slot::kMlpNorm, Slot::kMlpNormBias, l);
    if (cfg.linear_attention(l)) L.linear_attn = {ld.require(Slot::kLinearAttn, l), {}};
    if (cfg.linear_mlp(l)) L.linear_mlp = {ld.require(Slot::kLinearMlp, l), {}};
    if (cfg.sandwich_norm) {
      if (attention) L.post_attn_norm = ld.norm(Slot::kPostAttnNorm, Slot::kCount, l);
      if (mlp) L.post_mlp_norm = ld.norm(Slot::kPostMlpNorm, Slot::kCount, l);
    }
    if (cfg.qk_norm && attention) {
      L.q_norm = ld.norm(Slot::kQNorm, Slot::kCount, l);
      L.k_norm = ld.norm(Slot::kKNorm, Slot::kCount, l);
      L.q_norm.type = L.k_norm.type = NormType::kRMSNorm;
    }
    if (!attention) {
      // no q/k/v/o
    } else if (ld.mapped(Slot::kQkv)) {
      L.qkv = ld.linear(Slot::kQkv, Slot::kQkvBias, l);
    } else {
      L.q = ld.linear(Slot::kQ, Slot::kQBias, l);
      L.k = ld.linear(Slot::kK, Slot::kKBias, l);
      L.v = ld.linear(Slot::kV, Slot::kVBias, l);
      if (!L.q || !L.k || !L.v) raise<InvalidArgument>("layer {}: no q/k/v weights mapped", l);
    }
    if (attention) {
      L.o = ld.linear(Slot::kO, Slot::kOBias, l);
      if (!L.o) raise<InvalidArgument>("layer {}: no attention output weight mapped", l);
    }

    if (!mlp) {
      // no MLP
    } else if (cfg.is_moe(l)) {
      L.router = {ld.require(Slot::kRouter, l), {}};
      L.experts.resize(static_cast<size_t>(cfg.moe.num_experts));
      // Per-expert tensors (hub layout) or all experts stacked (transformers 5 layout),
      // sliced into zero-copy per-expert views.
      const bool stacked =
          !ld.present(Slot::kExpertDown, l, 0) && ld.present(Slot::kExpertsDown, l, -1);
      Tensor all_gate_up, all_down;
      if (stacked) {
        all_gate_up = ld.require(Slot::kExpertsGateUp, l);
        all_down = ld.require(Slot::kExpertsDown, l);
      }
      auto expert_view = [](const Tensor& all, int e) {
        const int64_t rows = all.dim(1), cols = all.dim(2);
        const size_t bytes = static_cast<size_t>(rows * cols) * dtype_size(all.dtype());
        auto* base =
            static_cast<uint8_t*>(const_cast<void*>(all.raw())) + bytes * static_cast<size_t>(e);
        return Tensor::wrap(base, {rows, cols}, all.dtype(), all.owner(), all.device());
      };
      for (int e = 0; e < cfg.moe.num_experts; ++e) {
        MoeExpertWeights& ew = L.experts[e];
        if (stacked) {
          ew.gate_up = expert_view(all_gate_up, e);
          ew.down = expert_view(all_down, e);
          continue;
        }
        ew.gate_up = ld.fetch(Slot::kExpertGateUp, l, e);
        if (!ew.gate_up) {
          ew.gate = ld.fetch(Slot::kExpertGate, l, e);
          ew.up = ld.fetch(Slot::kExpertUp, l, e);
        }
        ew.down = ld.fetch(Slot::kExpertDown, l, e);
        if (!(ew.gate_up || (ew.gate && ew.up)) || !ew.down)
          raise<InvalidArgument>("layer {} expert {}: incomplete expert weight mapping", l, e);
      }
      if (cfg.moe.shared_inter_size > 0) {
        L.shared_gate = {ld.require(Slot::kSharedGate, l), {}};
        L.shared_up = {ld.require(Slot::kSharedUp, l), {}};
        L.shared_down = {ld.require(Slot::kSharedDown, l), {}};
        if (cfg.moe.shared_expert_gate)
          L.shared_expert_gate = {ld.require(Slot::kSharedExpertGate, l), {}};
      }
    } else if (cfg.gated_mlp) {
      if (ld.mapped(Slot::kGateUp)) {
        L.gate_up = ld.linear(Slot::kGateUp, Slot::kCount, l);
      } else {
        L.gate = ld.linear(Slot::kGate, Slot::kGateBias, l);
        L.up = ld.linear(Slot::kUp, Slot::kUpBias, l);
        if (!L.gate || !L.up) raise<InvalidArgument>("layer {}: no gate/up weights mapped", l);
      }
      L.down = ld.linear(Slot::kDown, Slot::kDownBias, l);
    } else {
      L.up = ld.linear(Slot::kUp, Slot::kUpBias, l);
      L.down = ld.linear(Slot::kDown, Slot::kDownBias, l);
      if (!L.up) raise<InvalidArgument>("layer {}: no MLP input weight mapped", l);
    }
    if (mlp && !cfg.is_moe(l) && !L.down)
      raise<InvalidArgument>("layer {}: no MLP output weight mapped", l);
  }
  return w;
}

}  // namespace tachyon
