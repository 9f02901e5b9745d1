#include "model/vision/clip_weights.h"

#include <cstring>
#include <string>

#include "core/error.h"
#include "io/checkpoint.h"

namespace tachyon {

int64_t patch_matrix_cols(const ClipVisionConfig& c) {
  return (c.patch_dim() + 1 + 7) / 8 * 8;
}

namespace {

class Reader {
 public:
  Reader(const Checkpoint& ckpt, std::string prefix) : ckpt_(ckpt), prefix_(std::move(prefix)) {}

  // The tensor prefix + name, checked to have `shape` (InvalidArgument otherwise).
  Tensor get(const std::string& name, const Shape& shape) const {
    const std::string full = prefix_ + name;
    if (!ckpt_.contains(full)) raise<NotFound>("LLaVA checkpoint: no tensor '{}'", full);
    Tensor t = ckpt_.get(full);
    if (t.shape() != shape)
      raise<InvalidArgument>("LLaVA checkpoint: tensor '{}' is {}, expected shape {}", full,
                             t.str(), shape_str(shape));
    return t;
  }
  bool has(const std::string& name) const { return ckpt_.contains(prefix_ + name); }
  Tensor f32(const std::string& name, const Shape& shape) const {
    return get(name, shape).to(DType::kF32);
  }
  NormParams layer_norm(const std::string& name, int64_t d, double eps) const {
    NormParams n;
    n.type = NormType::kLayerNorm;
    n.weight = f32(name + ".weight", {d});
    n.bias = f32(name + ".bias", {d});
    n.eps = static_cast<float>(eps);
    return n;
  }
  LinearWeights linear(const std::string& name, int64_t out, int64_t in) const {
    LinearWeights l;
    l.w = get(name + ".weight", {out, in});
    l.b = f32(name + ".bias", {out});
    return l;
  }

 private:
  static std::string shape_str(const Shape& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
  }
  const Checkpoint& ckpt_;
  std::string prefix_;
};

// Rows of same-dtype matrices one after the other.
Tensor concat_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.dim(0);
  Tensor out = Tensor::empty({rows, parts[0].dim(1)}, parts[0].dtype());
  auto* dst = static_cast<char*>(out.raw());
  for (const Tensor& p : parts) {
    TACHYON_CHECK(p.dtype() == out.dtype() && p.dim(1) == out.dim(1), "concat_rows {}", p.str());
    std::memcpy(dst, p.raw(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

// The first prefix under which the checkpoint holds the tower's class embedding.
std::string find_prefix(const Checkpoint& ckpt, const std::vector<std::string>& prefixes,
                        const std::string& probe, const char* what) {
  for (const std::string& p : prefixes)
    if (ckpt.contains(p + probe)) return p;
  std::string tried;
  for (const std::string& p : prefixes) tried += (tried.empty() ? "'" : ", '") + p + probe + "'";
  raise<NotFound>("LLaVA checkpoint: no {} (looked for {})", what, tried);
}

}  // namespace

VisionWeights load_vision_weights(const Checkpoint& ckpt, const VisionModelConfig& cfg) {
  const ClipVisionConfig& c = cfg.clip;
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  const Reader v(ckpt,
                 find_prefix(ckpt,
                             {"model.vision_tower.vision_model.", "vision_tower.vision_model.",
                              "model.vision_tower.", "vision_tower."},
                             "embeddings.class_embedding", "vision tower"));
  const Reader p(ckpt, find_prefix(ckpt, {"model.multi_modal_projector.", "multi_modal_projector."},
                                   "linear_1.weight", "multi-modal projector"));
  VisionWeights w;

  const int64_t K = c.patch_dim(), cols = patch_matrix_cols(c);
  const Tensor conv =
      v.f32("embeddings.patch_embedding.weight", {D, c.num_channels, c.patch_size, c.patch_size});
  const Tensor cls = v.f32("embeddings.class_embedding", {D});
  w.patch = Tensor::zeros({D, cols}, DType::kF32);
  for (int64_t r = 0; r < D; ++r) {
    float* row = w.patch.data<float>() + r * cols;
    std::memcpy(row, conv.data<float>() + r * K, static_cast<size_t>(K) * sizeof(float));
    row[K] = cls.data<float>()[r];
  }
  w.positions = v.f32("embeddings.position_embedding.weight", {c.num_positions(), D});
  w.pre_norm = v.layer_norm("pre_layrnorm", D, c.layer_norm_eps);

  for (int32_t l = 0; l < cfg.layers_to_run(); ++l) {
    const std::string L = "encoder.layers." + std::to_string(l) + ".";
    ClipLayerWeights lw;
    lw.norm1 = v.layer_norm(L + "layer_norm1", D, c.layer_norm_eps);
    lw.norm2 = v.layer_norm(L + "layer_norm2", D, c.layer_norm_eps);
    const LinearWeights q = v.linear(L + "self_attn.q_proj", D, D);
    const LinearWeights k = v.linear(L + "self_attn.k_proj", D, D);
    const LinearWeights vv = v.linear(L + "self_attn.v_proj", D, D);
    if (q.w.dtype() != k.w.dtype() || q.w.dtype() != vv.w.dtype())
      raise<InvalidArgument>("LLaVA checkpoint: layer {}'s q, k and v differ in dtype", l);
    lw.qkv.w = concat_rows({q.w, k.w, vv.w});
    lw.qkv.b = concat_rows({q.b.reshape({D, 1}), k.b.reshape({D, 1}), vv.b.reshape({D, 1})})
                   .reshape({3 * D});
    lw.o = v.linear(L + "self_attn.out_proj", D, D);
    lw.fc1 = v.linear(L + "mlp.fc1", I, D);
    lw.fc2 = v.linear(L + "mlp.fc2", D, I);
    w.layers.push_back(std::move(lw));
  }

  if (cfg.projector_mlp) {
    w.proj1 = p.linear("linear_1", cfg.text_hidden, cfg.feature_dim());
    w.proj2 = p.linear("linear_2", cfg.text_hidden, cfg.text_hidden);
  } else {
    if (p.has("linear_2.weight"))
      raise<InvalidArgument>(
          "LLaVA checkpoint: a linear projector (mm_projector_type linear) with a linear_2");
    w.proj1 = p.linear("linear_1", cfg.text_hidden, cfg.feature_dim());
  }
  return w;
}

}  // namespace tachyon
