// The decoder's layer loop and blocks (decoder.h shows how a layer is composed); the
// weights' preparation is in decoder_weights.cc.
#include "model/decoder.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "model/rope.h"

namespace tachyon {

Tensor StepBuffer::view(Backend& be, int64_t rows, int64_t cols) {
  return view(be, rows, cols, be.activation_dtype());
}

Tensor StepBuffer::view(Backend& be, int64_t rows, int64_t cols, DType dtype) {
  const int64_t n = rows * cols;
  if (!storage || storage.dtype() != dtype || storage.numel() < n) {
    // Grow with headroom so that slowly growing steps do not reallocate every time.
    const int64_t cap = std::max<int64_t>(n + n / 4, 1);
    storage = be.alloc({cap}, dtype);
  }
  return Tensor::wrap(storage.raw(), {rows, cols}, dtype, storage.owner(), storage.device());
}

Decoder::Decoder(ModelConfig config, ModelWeights weights, Backend& backend)
    : cfg_(std::move(config)), w_(std::move(weights)), be_(backend) {
  cfg_.validate();
  prepare_weights(w_, be_);
  TACHYON_CHECK_EQ(static_cast<int32_t>(w_.layers.size()), cfg_.layer_num);
  for (int l = 0; l < cfg_.layer_num; ++l) {
    layouts_.push_back(QkvLayout{cfg_.heads(l), cfg_.kv_heads(l), cfg_.size_per_head});
    widest_.num_heads = std::max(widest_.num_heads, cfg_.heads(l));
    widest_.num_kv_heads = std::max(widest_.num_kv_heads, cfg_.kv_heads(l));
    widest_inter_ = std::max(widest_inter_, cfg_.inter(l));
  }
  widest_.head_dim = cfg_.size_per_head;
  prepare_input_norms();
  build_layer_inputs();
  Tensor slopes;
  if (cfg_.position == PositionType::kAlibi) {
    std::vector<float> s = alibi_slopes(cfg_.head_num, cfg_.alibi_style, cfg_.alibi_bias_max);
    if (cfg_.alibi_bf16)
      for (float& x : s) x = bf16_to_f32(f32_to_bf16(x));
    slopes = be_.upload(s.data(), {static_cast<int64_t>(s.size())}, DType::kF32, {});
  }
  attn_params_.resize(static_cast<size_t>(cfg_.layer_num));
  for (int l = 0; l < cfg_.layer_num; ++l) {
    AttentionParams& p = attn_params_[l];
    p.scale = static_cast<float>(cfg_.softmax_scale(l));
    p.softcap = static_cast<float>(cfg_.attn_softcap);
    p.sliding_window = cfg_.is_sliding(l) ? cfg_.sliding_window : 0;
    p.alibi_slopes = slopes;
    p.alibi_scale = cfg_.alibi_scaled ? p.scale : 1.f;
    p.alibi_bias_bf16 = cfg_.alibi_bf16;
  }
}

size_t Decoder::workspace_bytes(int32_t max_tokens) const {
  // Every activation buffer of compute() at max_tokens rows (they are kept between
  // steps), the f32 logits of every row, the attention split-K partials, and slack for
  // the backend's GEMM workspace and metadata.
  const size_t t = static_cast<size_t>(std::max(max_tokens, 1));
  const size_t es = dtype_size(be_.activation_dtype());
  const size_t d = static_cast<size_t>(cfg_.hidden_size);
  size_t inter = static_cast<size_t>(widest_inter_);
  if (cfg_.moe.num_experts > 0)
    inter = std::max({inter, static_cast<size_t>(cfg_.moe.shared_inter_size),
                      static_cast<size_t>(cfg_.moe.top_k) * static_cast<size_t>(cfg_.inter_size)});
  const size_t per_token = es * (8 * d + static_cast<size_t>(widest_.row_cols()) +
                                 static_cast<size_t>(widest_.q_cols()) + 3 * inter +
                                 static_cast<size_t>(cfg_.moe.num_experts) + 64);
  // The step's logits (ModelRunner adds its graph steps' own logits buffer).
  const size_t logits = t * static_cast<size_t>(cfg_.vocab_size) * sizeof(float);
  const size_t split_k = size_t{64} * std::min<size_t>(t, 1024) *
                         static_cast<size_t>(widest_.q_cols() + 2 * widest_.num_heads) *
                         sizeof(float);
  // An fp8 cache: the 16-bit staging of the blocks prefill kernels read (CudaBackend::
  // stage_fp8_cache), K and V, for a step's tokens and one full-length context, doubled
  // for the staging buffers' growth.
  size_t staging = 0;
  if (be_.kv_dtype() == DType::kF8E4M3)
    staging = 2 * (t + static_cast<size_t>(std::max<int64_t>(cfg_.max_seq_len, 0))) * 2 *
              static_cast<size_t>(widest_.kv_cols()) * es;
  return t * per_token * 5 / 4 + logits + split_k + staging + (size_t{64} << 20);
}

void Decoder::buffer_addresses(std::vector<const void*>& out) const {
  for (const StepBuffer* buf :
       {&residual_, &h_, &h2_, &embed_, &qkv_, &attn_, &o_, &mlp_, &act_, &shared_, &router_,
        &moe_ids_, &moe_w_, &shared_logit_, &final_, &final_proj_})
    out.push_back(buf->storage.raw());
}

void Decoder::compute(const StepInputs& in, std::span<LayerKvCache> kv, Tensor& logits) {
  const int64_t T = in.ids.dim(0);
  const int64_t R = logits.dim(0);
  const int64_t D = cfg_.hidden_size;
  step_ = &in;
  lora_ = in.lora.row_slots ? &in.lora : nullptr;
  kv_ = kv;
  cos_sin_ = in.cos_sin;
  // Embeddings.
  const Tensor& ids = in.ids;
  Tensor residual = residual_.view(be_, T, D);
  const float escale = static_cast<float>(cfg_.embedding_scale);
  if (w_.project_in) {
    Tensor e = embed_.view(be_, T, cfg_.embed_dim());
    be_.embedding(w_.embedding, ids, 0, escale, false, e);
    if (in.inject_rows) be_.scatter_rows(in.inject_values, in.inject_rows, e);
    be_.linear(e, w_.project_in.w, Tensor(), residual);
  } else {
    be_.embedding(w_.embedding, ids, 0, escale, false, residual);
    if (in.inject_rows) be_.scatter_rows(in.inject_values, in.inject_rows, residual);
  }
  if (cfg_.position == PositionType::kLearned)
    be_.embedding(w_.pos_embedding, in.positions, cfg_.learned_pos_offset, 1.f, true, residual);
  if (cfg_.embedding_norm) be_.add_norm(residual, Tensor(), Tensor(), w_.embed_norm, residual);

  if (in.rope_rows) {
    cos_sin_ = rope_gathered_.view(be_, T, in.rope_rows.dim(1), DType::kF32);
    be_.embedding(in.rope_rows, in.rope_positions, 0, 1.f, false, cos_sin_);
  }

  // The widest layer's buffers first (a recorded step reads them at fixed addresses).
  qkv_.view(be_, T, widest_.row_cols());
  attn_.view(be_, T, widest_.q_cols());
  act_.view(be_, T, std::max<int64_t>(widest_inter_, cfg_.moe.shared_inter_size));
  for (int l = 0; l < cfg_.layer_num; ++l) layer(l, residual);
  Tensor final_h = residual;
  if (cfg_.final_norm) final_h = normed(residual, w_.final_norm, h_);

  // The final hidden states asked for, as the LM head reads them.
  hidden_ = Tensor();
  if (in.hidden_rows) {
    const int64_t H = in.hidden_rows.dim(0);
    hidden_ = hidden_buf_.view(be_, H, D);
    be_.gather_rows(final_h, in.hidden_rows, hidden_);
    if (w_.project_out) {
      Tensor hp = hidden_proj_.view(be_, H, cfg_.embed_dim());
      be_.linear(hidden_, w_.project_out.w, Tensor(), hp);
      hidden_ = hp;
    }
  }

  // Logits for the requested rows only.
  if (R == 0) return;
  Tensor g = final_h;
  if (in.logits_rows) {
    g = final_.view(be_, R, D);
    be_.gather_rows(final_h, in.logits_rows, g);
  }
  if (w_.project_out) {
    Tensor gp = final_proj_.view(be_, R, cfg_.embed_dim());
    be_.linear(g, w_.project_out.w, Tensor(), gp);
    g = gp;
  }
  be_.linear(g, w_.lm_head.w, w_.lm_head.b, logits);
  if (cfg_.final_softcap > 0) be_.softcap(logits, static_cast<float>(cfg_.final_softcap));
}

void Decoder::layer(int l, Tensor& x) {
  const LayerWeights& L = w_.layers[l];
  const int64_t T = x.dim(0), D = cfg_.hidden_size;
  // A pruned layer may lack either block (pre-norm, sandwich and parallel forms only:
  // ModelConfig::validate).
  const bool attend = cfg_.has_attention(l), mlp_on = cfg_.has_mlp(l);
  if (cfg_.residual_from_norm) {
    // ChatGLM-6B: h = s * n1(x) + o(attn(n1(x))); x' = s * n2(h) + mlp(n2(h)).
    const float s = static_cast<float>(cfg_.residual_scale);
    Tensor h = normed(x, L.attn_norm, h_);
    Tensor o = o_.view(be_, T, D);
    product(attention(l, h, nullptr), L.o, o);
    be_.scale_add(h, s, o, x);
    h = normed(x, L.mlp_norm, h_);
    Tensor m = mlp_.view(be_, T, D);
    mlp(l, h, nullptr, m);
    be_.scale_add(h, s, m, x);
  } else if (cfg_.post_norm) {
    // x' = n1(x + o(attn(x))); x'' = n2(x' + mlp(x')).
    Tensor o = o_.view(be_, T, D);
    product(attention(l, x, nullptr), L.o, o);
    be_.add_norm(x, o, Tensor(), L.attn_norm, x);
    Tensor m = mlp_.view(be_, T, D);
    mlp(l, x, nullptr, m);
    be_.add_norm(x, m, Tensor(), L.mlp_norm, x);
  } else if (cfg_.parallel_residual) {
    // x' = x + o(attn(n1(x))) + mlp(n2(x)), n2 = n1 where the norm is shared.
    Tensor h = attend ? normed(x, L.attn_norm, h_) : Tensor();
    Tensor h2 = cfg_.parallel_shared_norm ? h : (mlp_on ? normed(x, L.mlp_norm, h2_) : Tensor());
    if (attend) be_.linear_residual(attention(l, h, nullptr), L.o, x, lora_);
    if (mlp_on) mlp_residual(l, h2, nullptr, x);
  } else if (cfg_.sandwich_norm) {
    // x' = x + n2(o(attn(n1(x)))); x'' = x' + n4(mlp(n3(x'))).
    if (attend) {
      Tensor o = o_.view(be_, T, D);
      product(attention(l, x, &L.attn_norm), L.o, o);
      be_.add_norm(o, Tensor(), Tensor(), L.post_attn_norm, o);
      be_.add(x, o, x);
    }
    if (mlp_on) {
      Tensor m = mlp_.view(be_, T, D);
      mlp(l, x, &L.mlp_norm, m);
      be_.add_norm(m, Tensor(), Tensor(), L.post_mlp_norm, m);
      be_.add(x, m, x);
    }
  } else {
    // Pre-norm: x' = x + o(attn(n1(x))); x'' = x' + mlp(n2(x')). A block replaced by a
    // linear map adds W n(x) instead (DeciLM's replace_with_linear).
    if (attend) be_.linear_residual(attention(l, x, &L.attn_norm), L.o, x, lora_);
    if (L.linear_attn) be_.linear_residual(normed(x, L.attn_norm, h_), L.linear_attn, x, nullptr);
    if (mlp_on) mlp_residual(l, x, &L.mlp_norm, x);
    if (L.linear_mlp) be_.linear_residual(normed(x, L.mlp_norm, h_), L.linear_mlp, x, nullptr);
  }
}

Tensor Decoder::attention(int l, const Tensor& x, const NormParams* norm) {
  const int64_t T = x.dim(0);
  const QkvLayout& layout = layouts_[l];
  Tensor qkv = qkv_.view(be_, T, layout.row_cols());
  be_.attention_input(x, norm, attn_in_[l], cos_sin_, step_->logn, step_->slots, kv_[l], qkv,
                      lora_);
  Tensor out = attn_.view(be_, T, layout.q_cols());
  be_.attention(qkv, layout, kv_[l], step_->meta, attn_params_[l], out);
  return out;
}

void Decoder::mlp_residual(int l, const Tensor& x, const NormParams* norm, Tensor& residual) {
  if (cfg_.is_moe(l)) {
    Tensor m = mlp_.view(be_, x.dim(0), cfg_.hidden_size);
    mlp(l, x, norm, m);
    be_.add(residual, m, residual);
    return;
  }
  Tensor a = act_.view(be_, x.dim(0), cfg_.inter(l));
  be_.mlp_input(x, norm, mlp_in_[l], a, lora_);
  be_.linear_residual(a, w_.layers[l].down, residual, lora_);
}

void Decoder::mlp(int l, const Tensor& x, const NormParams* norm, Tensor& out) {
  const LayerWeights& L = w_.layers[l];
  if (cfg_.is_moe(l)) {
    moe(l, norm != nullptr ? normed(x, *norm, h_) : x, out);
    return;
  }
  Tensor a = act_.view(be_, x.dim(0), cfg_.inter(l));
  be_.mlp_input(x, norm, mlp_in_[l], a, lora_);
  product(a, L.down, out);
}

void Decoder::moe(int l, const Tensor& h, Tensor& out) {
  const LayerWeights& L = w_.layers[l];
  const int64_t T = h.dim(0);
  const int32_t E = cfg_.moe.num_experts, K = cfg_.moe.top_k;
  Tensor logits = router_.view(be_, T, E);
  be_.linear(h, L.router.w, Tensor(), logits);
  Tensor ids = moe_ids_.view(be_, T, K, DType::kI32);
  Tensor wts = moe_w_.view(be_, T, K, DType::kF32);
  be_.moe_route(logits, K, cfg_.moe.norm_topk_prob, ids, wts);
  be_.moe_experts(h, ids, wts, L.experts, cfg_.activation, false, out);
  if (cfg_.moe.shared_inter_size == 0) return;
  Tensor a = act_.view(be_, T, cfg_.moe.shared_inter_size);
  be_.mlp_input(h, nullptr, shared_in_[l], a, nullptr);
  if (L.shared_expert_gate) {
    Tensor sh = shared_.view(be_, T, cfg_.hidden_size);
    be_.linear(a, L.shared_down.w, Tensor(), sh);
    Tensor gl = shared_logit_.view(be_, T, 1);
    be_.linear(h, L.shared_expert_gate.w, Tensor(), gl);
    be_.add_sigmoid_gated(sh, gl, out);
  } else {
    be_.linear_residual(a, LinearWeights{L.shared_down.w, Tensor()}, out, nullptr);
  }
}

void Decoder::product(const Tensor& x, const LinearWeights& w, Tensor& out) {
  be_.linear(x, w.w, w.b, out);
  if (lora_ != nullptr && w.lora) be_.lora(x, *lora_, w.lora, out, 0);
}

Tensor Decoder::normed(const Tensor& x, const NormParams& norm, StepBuffer& buf) {
  Tensor h = buf.view(be_, x.dim(0), cfg_.hidden_size);
  Tensor in = x;  // read only: add_norm without deltas does not write it
  be_.add_norm(in, Tensor(), Tensor(), norm, h);
  return h;
}

}  // namespace tachyon
