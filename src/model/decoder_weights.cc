// The decoder's weights in the form the backend's kernels read: uploaded (or converted)
// once, q/k/v and gate/up stacked into one matrix each where that pays, and the
// pre-norms of a plain pre-norm decoder folded into the products that read them.
#include <cstring>
#include <utility>

#include "model/decoder.h"

namespace tachyon {

namespace {

// Rows of host matrices [n_i, K] of one dtype stacked into one [sum n_i, K] matrix (and
// their f32 biases into one, zeros where a part has none); an empty result when the
// parts do not fit together (other dtypes or widths, not on the host).
LinearWeights stack_rows(const std::vector<const LinearWeights*>& parts) {
  const Tensor& first = parts.front()->w;
  int64_t rows = 0;
  bool any_bias = false;
  for (const LinearWeights* p : parts) {
    if (!p->w || p->w.ndim() != 2 || !p->w.device().is_cpu() || p->w.dtype() != first.dtype() ||
        p->w.dim(1) != first.dim(1))
      return {};
    if (p->b &&
        (p->b.dtype() != DType::kF32 || p->b.numel() != p->w.dim(0) || !p->b.device().is_cpu()))
      return {};
    rows += p->w.dim(0);
    any_bias = any_bias || static_cast<bool>(p->b);
  }
  LinearWeights out;
  out.w = Tensor::empty({rows, first.dim(1)}, first.dtype());
  if (any_bias) out.b = Tensor::zeros({rows}, DType::kF32);
  auto* dst = static_cast<char*>(out.w.raw());
  int64_t row = 0;
  for (const LinearWeights* p : parts) {
    std::memcpy(dst, p->w.raw(), p->w.nbytes());
    dst += p->w.nbytes();
    if (p->b) std::memcpy(out.b.data<float>() + row, p->b.raw(), p->b.nbytes());
    row += p->w.dim(0);
  }
  return out;
}

// On a device backend, or one that repacks linear weights anyway, separate q/k/v and
// gate/up projections become one matrix each (one GEMM instead of three or two per
// layer; the output columns are the same). A CPU that reads the checkpoint in place
// keeps its mapped views.
void fuse_projections(LayerWeights& L, Backend& be) {
  if (be.device().is_cpu() && !be.repacks_linear_weights()) return;
  if (!L.qkv && L.q && L.k && L.v) {
    LinearWeights f = stack_rows({&L.q, &L.k, &L.v});
    if (f) {
      L.qkv = std::move(f);
      L.q = L.k = L.v = {};
    }
  }
  if (!L.gate_up && L.gate && L.up && L.down) {
    LinearWeights f = stack_rows({&L.gate, &L.up});
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
    for (LinearWeights* l :
         {&L.qkv, &L.q, &L.k, &L.v, &L.o, &L.gate_up, &L.gate, &L.up, &L.down, &L.router,
          &L.shared_gate, &L.shared_up, &L.shared_down, &L.shared_expert_gate})
      prep_linear(*l);
    for (MoeExpertWeights& e : L.experts) {
      prep(e.gate_up);
      prep(e.gate);
      prep(e.up);
      prep(e.down);
    }
  }
}

void Decoder::fold_norms() {
  if (cfg_.residual_from_norm || cfg_.post_norm || cfg_.parallel_residual || cfg_.sandwich_norm ||
      !cfg_.gated_mlp)
    return;
  for (int l = 0; l < cfg_.layer_num; ++l) {
    const LayerWeights& L = w_.layers[l];
    if (cfg_.is_moe(l) || !L.qkv || !L.gate_up || !be_.folds_norm(L.qkv.w, L.attn_norm) ||
        !be_.folds_norm(L.gate_up.w, L.mlp_norm))
      return;
  }
  const std::vector<float> ones(static_cast<size_t>(cfg_.hidden_size), 1.f);
  const Tensor unit = be_.upload(ones.data(), {static_cast<int64_t>(ones.size())}, DType::kF32, {});
  for (LayerWeights& L : w_.layers) {
    for (auto [w, norm] :
         {std::pair{&L.qkv.w, &L.attn_norm}, std::pair{&L.gate_up.w, &L.mlp_norm}}) {
      *w = be_.fold_norm(*w, *norm);
      norm->weight = unit;
      norm->weight_offset = 0.f;
    }
  }
  norms_folded_ = true;
}

}  // namespace tachyon
