#include "model/vision/clip_tower.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace tachyon {

namespace {

constexpr int32_t kBlockSize = 16;  // of the scratch KV cache

void prepare_norm(Backend& be, NormParams& n) {
  n.weight = be.prepare_weight(n.weight);
  n.bias = be.prepare_weight(n.bias);
}

void prepare_linear(Backend& be, LinearWeights& l) {
  if (!l) return;
  l.w = be.prepare_linear_weight(l.w);
  if (l.b) l.b = be.prepare_weight(l.b);
}

}  // namespace

VisionTower::VisionTower(VisionModelConfig cfg, VisionWeights weights, Backend& backend)
    : cfg_(std::move(cfg)), be_(backend), w_(std::move(weights)) {
  TACHYON_CHECK(static_cast<int32_t>(w_.layers.size()) == cfg_.layers_to_run(),
                "vision tower: {} layers for {} to run", w_.layers.size(), cfg_.layers_to_run());
  w_.patch = be_.prepare_linear_weight(w_.patch);
  w_.positions = be_.prepare_weight(w_.positions);
  prepare_norm(be_, w_.pre_norm);
  for (ClipLayerWeights& l : w_.layers) {
    prepare_norm(be_, l.norm1);
    prepare_norm(be_, l.norm2);
    prepare_linear(be_, l.qkv);
    prepare_linear(be_, l.o);
    prepare_linear(be_, l.fc1);
    prepare_linear(be_, l.fc2);
  }
  prepare_linear(be_, w_.proj1);
  prepare_linear(be_, w_.proj2);
}

void VisionTower::check_image(const Tensor& px) const {
  const ClipVisionConfig& c = cfg_.clip;
  if (!px || !px.device().is_cpu() || px.dtype() != DType::kF32 || px.ndim() != 3 ||
      px.dim(0) != c.num_channels || px.dim(1) != c.image_size || px.dim(2) != c.image_size)
    raise<InvalidArgument>(
        "image pixel_values {}: the vision tower takes f32 [{}, {}, {}] on the host",
        px ? px.str() : std::string("(none)"), c.num_channels, c.image_size, c.image_size);
  const float* p = px.data<float>();
  for (int64_t i = 0; i < px.numel(); ++i)
    if (!std::isfinite(p[i]))
      raise<InvalidArgument>("image pixel_values: value {} at index {} is not finite", p[i], i);
}

Tensor VisionTower::upload_rows(const Tensor& host) {
  const DType dt = be_.activation_dtype();
  const Tensor t = dt == DType::kF32 ? host : host.to(dt);
  return be_.upload(t.raw(), t.shape(), dt, {});
}

Tensor VisionTower::download_f32(const Tensor& t) {
  return be_.to_host(t).to(DType::kF32);  // to() copies: the CPU's to_host is t itself
}

Tensor VisionTower::features(std::span<const Tensor> images) {
  if (images.empty()) raise<InvalidArgument>("vision tower: no images");
  for (const Tensor& px : images) check_image(px);
  const ClipVisionConfig& c = cfg_.clip;
  const int64_t N = static_cast<int64_t>(images.size());
  const int64_t S = c.num_positions(), D = c.hidden_size, T = N * S;
  const int64_t K = c.patch_dim(), cols = patch_matrix_cols(c);
  const int32_t ps = c.patch_size, side = c.patches_per_side(), img = c.image_size;

  // Each token's row of the patch product: the class token a one in column K, a patch
  // its pixels in the convolution's (channel, row, column) order.
  Tensor rows = Tensor::zeros({T, cols}, DType::kF32);
  for (int64_t n = 0; n < N; ++n) {
    const float* px = images[static_cast<size_t>(n)].data<float>();
    float* base = rows.data<float>() + n * S * cols;
    base[K] = 1.f;
    for (int32_t py = 0; py < side; ++py)
      for (int32_t pxi = 0; pxi < side; ++pxi) {
        float* row = base + (1 + int64_t{py} * side + pxi) * cols;
        for (int32_t ch = 0; ch < c.num_channels; ++ch)
          for (int32_t ky = 0; ky < ps; ++ky)
            std::memcpy(row + (int64_t{ch} * ps + ky) * ps,
                        px + (int64_t{ch} * img + int64_t{py} * ps + ky) * img + int64_t{pxi} * ps,
                        static_cast<size_t>(ps) * sizeof(float));
      }
  }
  const DType act = be_.activation_dtype();
  Tensor h = be_.alloc({T, D}, act);
  be_.linear(upload_rows(rows), w_.patch, {}, h);

  // Learned positions 0 .. S - 1 for every image; each image a sequence of the scratch
  // cache, all of it its bidirectional prefix.
  const int32_t blocks = static_cast<int32_t>((S + kBlockSize - 1) / kBlockSize);
  std::vector<int32_t> pos(static_cast<size_t>(T)), slots(static_cast<size_t>(T));
  std::vector<int32_t> qstart, ctx, tables, prefix;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t s = 0; s < S; ++s) {
      pos[static_cast<size_t>(n * S + s)] = static_cast<int32_t>(s);
      slots[static_cast<size_t>(n * S + s)] = static_cast<int32_t>(n * blocks * kBlockSize + s);
    }
    qstart.push_back(static_cast<int32_t>(n * S));
    ctx.push_back(static_cast<int32_t>(S));
    prefix.push_back(static_cast<int32_t>(S));
    for (int32_t b = 0; b < blocks; ++b) tables.push_back(static_cast<int32_t>(n) * blocks + b);
  }
  qstart.push_back(static_cast<int32_t>(T));
  be_.embedding(w_.positions, be_.upload_i32(pos.data(), T), 0, 1.f, true, h);
  be_.add_norm(h, {}, {}, w_.pre_norm, h);

  const Tensor slot_t = be_.upload_i32(slots.data(), T);
  AttentionMeta meta;
  meta.query_start = be_.upload_i32(qstart.data(), N + 1);
  meta.context_lens = be_.upload_i32(ctx.data(), N);
  meta.block_tables = be_.upload(tables.data(), {N, blocks}, DType::kI32, {});
  meta.prefix_lens = be_.upload_i32(prefix.data(), N);
  meta.num_seqs = static_cast<int32_t>(N);
  meta.max_blocks_per_seq = blocks;
  meta.max_query_len = static_cast<int32_t>(S);
  meta.max_context_len = static_cast<int32_t>(S);
  meta.host_query_start = &qstart;
  meta.host_context_lens = &ctx;
  const QkvLayout layout{c.num_heads, c.num_heads, c.head_dim()};
  const Shape kv_shape =
      kv_cache_shape(be_.kv_dtype(), N * blocks, c.num_heads, kBlockSize, c.head_dim());
  LayerKvCache cache{be_.alloc(kv_shape, be_.kv_dtype()), be_.alloc(kv_shape, be_.kv_dtype())};
  AttentionParams params;
  params.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim()));

  // hidden_states[i] on the host for each i the projector reads.
  std::vector<Tensor> states(cfg_.feature_layers.size());
  auto keep = [&](int32_t index) {
    for (size_t k = 0; k < states.size(); ++k)
      if (cfg_.feature_layers[k] == index && !states[k]) states[k] = download_f32(h);
  };
  keep(0);
  Tensor normed = be_.alloc({T, D}, act), qkv = be_.alloc({T, 3 * D}, act);
  Tensor attn = be_.alloc({T, D}, act), out = be_.alloc({T, D}, act);
  Tensor mid = be_.alloc({T, c.intermediate_size}, act);
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const ClipLayerWeights& lw = w_.layers[l];
    be_.add_norm(h, {}, {}, lw.norm1, normed);
    be_.linear(normed, lw.qkv.w, lw.qkv.b, qkv);
    be_.write_kv(qkv, layout, slot_t, cache);
    be_.attention(qkv, layout, cache, meta, params, attn);
    be_.linear(attn, lw.o.w, lw.o.b, out);
    be_.add_norm(h, out, {}, lw.norm2, normed);  // h += attention; normed = layer_norm2(h)
    be_.linear(normed, lw.fc1.w, lw.fc1.b, mid, 0, c.act);
    be_.linear(mid, lw.fc2.w, lw.fc2.b, out);
    be_.add(out, h, h);
    keep(static_cast<int32_t>(l) + 1);
  }

  // The selected tokens of each image, the layers side by side.
  const int64_t first = cfg_.keep_class_token ? 0 : 1, tokens = cfg_.tokens_per_image();
  const int64_t F = cfg_.feature_dim();
  Tensor feats = Tensor::empty({N * tokens, F}, DType::kF32);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < tokens; ++t)
      for (size_t k = 0; k < states.size(); ++k)
        std::memcpy(feats.data<float>() + (n * tokens + t) * F + static_cast<int64_t>(k) * D,
                    states[k].data<float>() + (n * S + first + t) * D,
                    static_cast<size_t>(D) * sizeof(float));
  return feats;
}

Tensor VisionTower::project(const Tensor& features) {
  TACHYON_CHECK(features.ndim() == 2 && features.dim(1) == cfg_.feature_dim() &&
                    features.dtype() == DType::kF32 && features.device().is_cpu(),
                "vision projector: features {} for width {}", features.str(), cfg_.feature_dim());
  const int64_t R = features.dim(0), E = cfg_.text_hidden;
  const DType act = be_.activation_dtype();
  Tensor x = upload_rows(features);
  Tensor y = be_.alloc({R, E}, act);
  if (!w_.proj2) {
    be_.linear(x, w_.proj1.w, w_.proj1.b, y);
    return download_f32(y);
  }
  Tensor mid = be_.alloc({R, E}, act);
  be_.linear(x, w_.proj1.w, w_.proj1.b, mid, 0, cfg_.projector_act);
  be_.linear(mid, w_.proj2.w, w_.proj2.b, y);
  return download_f32(y);
}

}  // namespace tachyon
