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
  fold_norms();
  TACHYON_CHECK_EQ(static_cast<int32_t>(w_.layers.size()), cfg_.layer_num);
  layout_ = QkvLayout{cfg_.head_num, cfg_.head_num_kv, cfg_.size_per_head};
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
  size_t inter = static_cast<size_t>(cfg_.inter_size);
  if (cfg_.moe.num_experts > 0)
    inter = std::max({inter, static_cast<size_t>(cfg_.moe.shared_inter_size),
                      static_cast<size_t>(cfg_.moe.top_k) * static_cast<size_t>(cfg_.inter_size)});
  const size_t per_token = es * (8 * d + static_cast<size_t>(layout_.row_cols()) +
                                 static_cast<size_t>(layout_.q_cols()) + 3 * inter +
                                 static_cast<size_t>(cfg_.moe.num_experts) + 64);
  // The step's logits (ModelRunner adds its graph steps' own logits buffer).
  const size_t logits = t * static_cast<size_t>(cfg_.vocab_size) * sizeof(float);
  const size_t split_k = size_t{64} * std::min<size_t>(t, 1024) *
                         static_cast<size_t>(layout_.q_cols() + 2 * cfg_.head_num) * sizeof(float);
  // An fp8 cache: the 16-bit staging of the blocks prefill kernels read (CudaBackend::
  // stage_fp8_cache), K and V, for a step's tokens and one full-length context, doubled
  // for the staging buffers' growth.
  size_t staging = 0;
  if (be_.kv_dtype() == DType::kF8E4M3)
    staging = 2 * (t + static_cast<size_t>(std::max<int64_t>(cfg_.max_seq_len, 0))) * 2 *
              static_cast<size_t>(cfg_.kv_size()) * es;
  return t * per_token * 5 / 4 + logits + split_k + staging + (size_t{64} << 20);
}

void Decoder::buffer_addresses(std::vector<const void*>& out) const {
  for (const StepBuffer* buf :
       {&residual_, &h_, &h2_, &embed_, &qkv_, &attn_, &o_, &mlp_, &gate_up_, &act_, &shared_,
        &router_, &moe_ids_, &moe_w_, &shared_logit_, &final_, &final_proj_})
    out.push_back(buf->storage.raw());
}

void Decoder::compute(const StepInputs& in, std::span<LayerKvCache> kv, Tensor& logits) {
  const int64_t T = in.ids.dim(0);
  const int64_t R = logits.dim(0);
  const int64_t D = cfg_.hidden_size;
  step_ = &in;
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

  Tensor h = h_.view(be_, T, D);
  Tensor o = o_.view(be_, T, D);
  Tensor m = mlp_.view(be_, T, D);
  Tensor pending1, pending2;
  squares_ = RowSquares{};
  const float rscale = static_cast<float>(cfg_.residual_scale);
  for (int l = 0; l < cfg_.layer_num; ++l) {
    const LayerWeights& L = w_.layers[l];
    if (cfg_.residual_from_norm) {
      // h = s * n1(x) + attn(n1(x)); x' = s * n2(h) + mlp(n2(h)).
      be_.add_norm(residual, Tensor(), Tensor(), L.attn_norm, h);
      attention_block(l, h, o);
      be_.scale_add(h, rscale, o, residual);
      be_.add_norm(residual, Tensor(), Tensor(), L.mlp_norm, h);
      mlp_block(l, h, m);
      be_.scale_add(h, rscale, m, residual);
      continue;
    }
    if (cfg_.post_norm) {
      attention_block(l, residual, o);
      be_.add_norm(residual, o, Tensor(), L.attn_norm, residual);
      mlp_block(l, residual, m);
      be_.add_norm(residual, m, Tensor(), L.mlp_norm, residual);
      continue;
    }
    if (!cfg_.parallel_residual && !cfg_.sandwich_norm) {
      // The o and down projections add into the residual stream themselves where the
      // backend can (the next norm then reads one tensor instead of two). With the norms
      // folded, a product may normalise the residual's rows itself (no norm pass).
      bool o_added;
      if (norms_folded_ && !pending1 && !pending2) {
        o_added = attention_block(l, residual, o, &residual, &L.attn_norm);
      } else {
        be_.add_norm(residual, pending1, pending2, L.attn_norm, h);
        squares_ = RowSquares{};
        o_added = attention_block(l, h, o, &residual);
      }
      bool m_added;
      if (norms_folded_ && o_added) {
        m_added = mlp_block(l, residual, m, &residual, &L.mlp_norm);
      } else {
        be_.add_norm(residual, o_added ? Tensor() : o, Tensor(), L.mlp_norm, h);
        squares_ = RowSquares{};
        m_added = mlp_block(l, h, m, &residual);
      }
      pending1 = m_added ? Tensor() : m;
      pending2 = Tensor();
      continue;
    }
    be_.add_norm(residual, pending1, pending2, L.attn_norm, h);
    if (cfg_.parallel_residual) {
      attention_block(l, h, o);
      if (cfg_.parallel_shared_norm) {
        mlp_block(l, h, m);
      } else {
        Tensor h2 = h2_.view(be_, T, D);
        be_.add_norm(residual, Tensor(), Tensor(), L.mlp_norm, h2);
        mlp_block(l, h2, m);
      }
      pending1 = o;
      pending2 = m;
    } else {  // sandwich_norm
      attention_block(l, h, o);
      be_.add_norm(o, Tensor(), Tensor(), L.post_attn_norm, o);
      be_.add_norm(residual, o, Tensor(), L.mlp_norm, h);
      mlp_block(l, h, m);
      be_.add_norm(m, Tensor(), Tensor(), L.post_mlp_norm, m);
      pending1 = m;
      pending2 = Tensor();
    }
  }
  Tensor final_h = residual;
  if (cfg_.final_norm) {
    be_.add_norm(residual, pending1, pending2, w_.final_norm, h);
    final_h = h;
  } else {
    if (pending1) be_.add(residual, pending1, residual);
    if (pending2) be_.add(residual, pending2, residual);
  }

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

bool Decoder::attention_block(int l, const Tensor& in, Tensor& out, Tensor* add_into,
                              const NormParams* rms) {
  const LayerWeights& L = w_.layers[l];
  const int64_t T = in.dim(0);
  Tensor qkv = qkv_.view(be_, T, layout_.row_cols());
  const bool rotary = cfg_.position == PositionType::kRotary;
  const int32_t rot = rotary ? static_cast<int32_t>(cos_sin_.dim(1)) : 0;
  const Tensor& slots = step_->slots;
  const Tensor& logn = step_->logn;
  // The product, the rotary and the cache write in one pass, where nothing else touches
  // the rows between them (and, given rms, the rows' normalisation).
  const RowRms row_rms{rms != nullptr ? rms->eps : 0.f, &squares_};
  const bool fused =
      L.qkv && rotary && cfg_.clip_qkv <= 0 && !cfg_.qk_norm && !logn &&
      be_.linear_rotary_kv(in, L.qkv.w, L.qkv.b, qkv, layout_, cos_sin_, cfg_.rope.style, rot,
                           slots, kv_[l], rms != nullptr ? &row_rms : nullptr);
  const Tensor h = rms != nullptr && !fused ? normed(in, *rms) : in;
  if (!fused) {
    if (L.qkv) {
      be_.linear(h, L.qkv.w, L.qkv.b, qkv);
    } else {
      be_.linear(h, L.q.w, L.q.b, qkv, 0);
      be_.linear(h, L.k.w, L.k.b, qkv, layout_.q_cols());
      be_.linear(h, L.v.w, L.v.b, qkv, layout_.q_cols() + layout_.kv_cols());
    }
    if (cfg_.clip_qkv > 0) be_.clamp(qkv, static_cast<float>(cfg_.clip_qkv));
    if (cfg_.qk_norm) be_.qk_norm(qkv, layout_, L.q_norm, L.k_norm);
    if (logn) be_.scale_queries(qkv, layout_, logn);
    if (rotary)
      be_.rotary_write_kv(qkv, layout_, cos_sin_, cfg_.rope.style, rot, slots, kv_[l]);
    else
      be_.write_kv(qkv, layout_, slots, kv_[l]);
  }
  Tensor attn = attn_.view(be_, T, layout_.q_cols());
  be_.attention(qkv, layout_, kv_[l], step_->meta, attn_params_[l], attn);
  if (add_into != nullptr && be_.linear_add(attn, L.o.w, L.o.b, *add_into, squares_out()))
    return true;
  be_.linear(attn, L.o.w, L.o.b, out);
  return false;
}

bool Decoder::mlp_block(int l, const Tensor& in, Tensor& out, Tensor* add_into,
                        const NormParams* rms) {
  const LayerWeights& L = w_.layers[l];
  const int64_t T = in.dim(0);
  Tensor h = in;
  if (rms != nullptr) {
    // gate/up with the gated activation and the rows' normalisation in one product, or
    // the weightless norm's pass first.
    const RowRms row_rms{rms->eps, &squares_};
    Tensor a = act_.view(be_, T, cfg_.inter_size);
    if (cfg_.gated_mlp && L.gate_up &&
        be_.linear_gated(in, L.gate_up.w, L.gate_up.b, cfg_.activation, a, &row_rms))
      return down_block(l, a, out, add_into);
    h = normed(in, *rms);
  }
  if (cfg_.is_moe(l)) {
    const int32_t E = cfg_.moe.num_experts, K = cfg_.moe.top_k;
    Tensor logits = router_.view(be_, T, E);
    be_.linear(h, L.router.w, Tensor(), logits);
    Tensor ids = moe_ids_.view(be_, T, K, DType::kI32);
    Tensor wts = moe_w_.view(be_, T, K, DType::kF32);
    be_.moe_route(logits, K, cfg_.moe.norm_topk_prob, ids, wts);
    be_.moe_experts(h, ids, wts, L.experts, cfg_.activation, false, out);
    if (cfg_.moe.shared_inter_size > 0) {
      const int64_t Is = cfg_.moe.shared_inter_size;
      Tensor gu = gate_up_.view(be_, T, 2 * Is);
      be_.linear(h, L.shared_gate.w, Tensor(), gu, 0);
      be_.linear(h, L.shared_up.w, Tensor(), gu, Is);
      Tensor a = act_.view(be_, T, Is);
      be_.gated_activation(gu, cfg_.activation, a);
      Tensor sh = shared_.view(be_, T, cfg_.hidden_size);
      be_.linear(a, L.shared_down.w, Tensor(), sh);
      if (L.shared_expert_gate) {
        Tensor gl = shared_logit_.view(be_, T, 1);
        be_.linear(h, L.shared_expert_gate.w, Tensor(), gl);
        be_.add_sigmoid_gated(sh, gl, out);
      } else {
        be_.add(out, sh, out);
      }
    }
    return false;
  }
  const int64_t I = cfg_.inter_size;
  Tensor a = act_.view(be_, T, I);
  if (cfg_.gated_mlp) {
    Tensor gu = gate_up_.view(be_, T, 2 * I);
    if (L.gate_up && be_.linear_gated(h, L.gate_up.w, L.gate_up.b, cfg_.activation, a)) {
      // gate, up and the activation in one product
    } else if (L.gate_up) {
      be_.linear(h, L.gate_up.w, L.gate_up.b, gu);
      be_.gated_activation(gu, cfg_.activation, a);
    } else {
      be_.linear(h, L.gate.w, L.gate.b, gu, 0);
      be_.linear(h, L.up.w, L.up.b, gu, I);
      be_.gated_activation(gu, cfg_.activation, a);
    }
  } else {
    be_.linear(h, L.up.w, L.up.b, a, 0, cfg_.activation);
  }
  return down_block(l, a, out, add_into);
}

Tensor Decoder::normed(const Tensor& in, const NormParams& norm) {
  Tensor h = h_.view(be_, in.dim(0), cfg_.hidden_size);
  Tensor residual = in;  // (no deltas: read only)
  be_.add_norm(residual, Tensor(), Tensor(), norm, h);
  return h;
}

bool Decoder::down_block(int l, const Tensor& a, Tensor& out, Tensor* add_into) {
  const LayerWeights& L = w_.layers[l];
  if (add_into != nullptr && be_.linear_add(a, L.down.w, L.down.b, *add_into, squares_out()))
    return true;
  be_.linear(a, L.down.w, L.down.b, out);
  return false;
}

}  // namespace tachyon
