// The decoder's weights in the form the backend's kernels read: uploaded (or converted)
// once, q/k/v and gate/up stacked into one matrix each where that pays, the input norms
// offered to the backend to fold into the products that read them, and each layer's
// AttentionInput and MlpInput.
#include <algorithm>
#include <cstring>
#include <utility>

#include "core/quant.h"
#include "model/decoder.h"

namespace tachyon {

namespace {

// Whether every part's bias (where it has one) is an f32 host vector of its rows.
bool biases_stack(const std::vector<const LinearWeights*>& parts) {
  for (const LinearWeights* p : parts)
    if (p->b &&
        (p->b.dtype() != DType::kF32 || p->b.numel() != p->w.dim(0) || !p->b.device().is_cpu()))
      return false;
  return true;
}

// The parts' biases stacked into one, zeros where a part has none; empty when no part
// has one.
Tensor stacked_bias(const std::vector<const LinearWeights*>& parts) {
  if (std::none_of(parts.begin(), parts.end(), [](const LinearWeights* p) { return bool(p->b); }))
    return {};
  int64_t rows = 0;
  for (const LinearWeights* p : parts) rows += p->w.dim(0);
  Tensor b = Tensor::zeros({rows}, DType::kF32);
  int64_t row = 0;
  for (const LinearWeights* p : parts) {
    if (p->b) std::memcpy(b.data<float>() + row, p->b.raw(), p->b.nbytes());
    row += p->w.dim(0);
  }
  return b;
}

// Rows of host matrices [n_i, K] of one dtype stacked into one [sum n_i, K] matrix (and
// their biases, stacked_bias); an empty result when the parts do not fit together (other
// dtypes or widths, not on the host).
LinearWeights stack_rows(const std::vector<const LinearWeights*>& parts) {
  const Tensor& first = parts.front()->w;
  int64_t rows = 0;
  for (const LinearWeights* p : parts) {
    if (!p->w || p->w.ndim() != 2 || !p->w.device().is_cpu() || p->w.dtype() != first.dtype() ||
        p->w.dim(1) != first.dim(1))
      return {};
    rows += p->w.dim(0);
  }
  if (!biases_stack(parts)) return {};
  LinearWeights out;
  out.w = Tensor::empty({rows, first.dim(1)}, first.dtype());
  auto* dst = static_cast<char*>(out.w.raw());
  for (const LinearWeights* p : parts) {
    std::memcpy(dst, p->w.raw(), p->w.nbytes());
    dst += p->w.nbytes();
  }
  out.b = stacked_bias(parts);
  return out;
}

// Quantized host matrices (core/quant.h) stacked row-wise (stack_quantized_rows) with
// their biases; empty when the parts are not all quantized or do not stack (other
// schemes, group sizes, permutations).
LinearWeights stack_quantized(const std::vector<const LinearWeights*>& parts) {
  std::vector<const QuantizedMatrix*> mats;
  for (const LinearWeights* p : parts) {
    const QuantizedMatrix* m = quantized(p->w);
    if (m == nullptr) return {};
    mats.push_back(m);
  }
  if (!biases_stack(parts)) return {};
  std::shared_ptr<QuantizedMatrix> stacked = stack_quantized_rows(mats);
  if (!stacked) return {};
  LinearWeights out;
  out.w = quantized_view(std::move(stacked));
  out.b = stacked_bias(parts);
  return out;
}

// Parts stacked as quantized matrices when they are, else as dense rows.
LinearWeights stack_parts(const std::vector<const LinearWeights*>& parts) {
  if (quantized(parts.front()->w) != nullptr) return stack_quantized(parts);
  return stack_rows(parts);
}

// On a device backend, or one that repacks linear weights anyway, separate q/k/v and
// gate/up projections become one matrix each (one GEMM instead of three or two per
// layer; the output columns are the same). A CPU that reads the checkpoint in place
// keeps its mapped views; quantized matrices are repacked on every backend, so they
// are stacked everywhere (those that do not stack stay apart).
void fuse_projections(LayerWeights& L, Backend& be) {
  const bool quant = quantized(L.q.w) != nullptr || quantized(L.gate.w) != nullptr;
  if (be.device().is_cpu() && !be.repacks_linear_weights() && !quant) return;
  if (!L.qkv && L.q && L.k && L.v) {
    LinearWeights f = stack_parts({&L.q, &L.k, &L.v});
    if (f) {
      L.qkv = std::move(f);
      L.q = L.k = L.v = {};
    }
  }
  if (!L.gate_up && L.gate && L.up && L.down) {
    LinearWeights f = stack_parts({&L.gate, &L.up});
    if (f) {
      L.gate_up = std::move(f);
      L.gate = L.up = {};
    }
  }
}

}  // namespace

// Every weight in the form the backend's kernels read (on a GPU: converted and
// uploaded once; on the CPU: the same tensors).
void Decoder::prepare_weights(ModelWeights& w, Backend& be) {
  auto prep = [&](Tensor& t) {
    if (t) t = be.prepare_weight(t);
  };
  auto prep_norm = [&](NormParams& n) {
    prep(n.weight);
    prep(n.bias);
  };
  auto prep_linear = [&](LinearWeights& l) {
    if (l.w) l.w = be.prepare_linear_weight(l.w);
    prep(l.b);
  };
  const bool tied = w.lm_head.w.raw() == w.embedding.raw();
  w.tied_lm_head = tied;
  const Tensor table = w.embedding;  // as loaded
  prep(w.embedding);
  prep(w.pos_embedding);
  prep_norm(w.embed_norm);
  prep_norm(w.final_norm);
  prep_linear(w.project_in);
  prep_linear(w.project_out);
  if (tied) {
    // The prepared table itself, unless linear weights are repacked: the embedding's
    // rows are looked up as they are, so the lm_head gets its own copy.
    w.lm_head.w = be.repacks_linear_weights() ? be.prepare_linear_weight(table) : w.embedding;
    prep(w.lm_head.b);
  } else {
    prep_linear(w.lm_head);
  }
  for (LayerWeights& L : w.layers) {
    fuse_projections(L, be);
    for (NormParams* n :
         {&L.attn_norm, &L.mlp_norm, &L.post_attn_norm, &L.post_mlp_norm, &L.q_norm, &L.k_norm})
      prep_norm(*n);
    for (LinearWeights* l : {&L.qkv, &L.q, &L.k, &L.v, &L.o, &L.gate_up, &L.gate, &L.up, &L.down,
                             &L.router, &L.shared_gate, &L.shared_up, &L.shared_down,
                             &L.shared_expert_gate, &L.linear_attn, &L.linear_mlp})
      prep_linear(*l);
    for (MoeExpertWeights& e : L.experts) {
      prep(e.gate_up);
      prep(e.gate);
      prep(e.up);
      prep(e.down);
    }
  }
}

void Decoder::build_layer_inputs() {
  const size_t n = static_cast<size_t>(cfg_.layer_num);
  attn_in_.resize(n);
  mlp_in_.resize(n);
  shared_in_.resize(n);
  for (size_t l = 0; l < n; ++l) {
    const LayerWeights& L = w_.layers[l];
    AttentionInput& a = attn_in_[l];
    a.layout = layouts_[l];
    a.qkv = L.qkv;
    a.q = L.q;
    a.k = L.k;
    a.v = L.v;
    a.clip = static_cast<float>(std::max(cfg_.clip_qkv, 0.0));
    if (cfg_.qk_norm) {
      a.q_norm = L.q_norm;
      a.k_norm = L.k_norm;
    }
    a.rotary = cfg_.position == PositionType::kRotary ? cfg_.rope.style : RotaryStyle::kNone;
    mlp_in_[l] = MlpInput{cfg_.gated_mlp, cfg_.activation, L.gate_up, L.gate, L.up};
    shared_in_[l] = MlpInput{true, cfg_.activation, {}, L.shared_gate, L.shared_up};
  }
}

void Decoder::fold_norm(NormParams& norm, std::span<Tensor* const> readers,
                        std::vector<float>& scale) {
  const Tensor weight = norm.weight;
  const float offset = norm.weight_offset;
  be_.prepare_input_norm(norm, readers);
  if (!norm.folded || !weight) return;
  // The scale the readers' weights now carry, for the adapters that read the same rows.
  const Tensor host = be_.to_host(weight);
  scale.resize(static_cast<size_t>(host.numel()));
  for (size_t i = 0; i < scale.size(); ++i)
    scale[i] = offset + host.data<float>()[static_cast<int64_t>(i)];
}

void Decoder::prepare_input_norms() {
  folded_scales_.assign(static_cast<size_t>(cfg_.layer_num), {});
  // A pre-norm layer's norms are read only by the products of attention_input() and
  // mlp_input() (post-norm and the residual from the norm read them otherwise, a
  // parallel layer's norm feeds both blocks, and a MoE block's router and experts).
  if (cfg_.residual_from_norm || cfg_.post_norm || cfg_.parallel_residual) return;
  for (int l = 0; l < cfg_.layer_num; ++l) {
    LayerWeights& L = w_.layers[static_cast<size_t>(l)];
    std::vector<Tensor*> readers;
    for (LinearWeights* p : {&L.qkv, &L.q, &L.k, &L.v})
      if (*p) readers.push_back(&p->w);
    if (!readers.empty()) fold_norm(L.attn_norm, readers, folded_scales_[l].attn);
    if (cfg_.is_moe(l)) continue;
    readers.clear();
    for (LinearWeights* p : {&L.gate_up, &L.gate, &L.up})
      if (*p) readers.push_back(&p->w);
    if (!readers.empty()) fold_norm(L.mlp_norm, readers, folded_scales_[l].mlp);
  }
}

}  // namespace tachyon
