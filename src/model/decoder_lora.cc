// The decoder's LoRA arena: where each adaptable product's adapters lie in a slot's row
// (plan_lora), and an adapter's modules written into such a row (pack_lora).
#include <algorithm>
#include <string>

#include "core/error.h"
#include "model/decoder.h"
#include "model/lora_adapter.h"

namespace tachyon {
namespace {

// The adaptable products of layer l, in arena order.
std::vector<LinearWeights*> adaptable(LayerWeights& L, bool mlp) {
  std::vector<LinearWeights*> out;
  for (LinearWeights* p : {&L.qkv, &L.q, &L.k, &L.v, &L.o})
    if (*p) out.push_back(p);
  if (mlp)
    for (LinearWeights* p : {&L.gate_up, &L.gate, &L.up, &L.down})
      if (*p) out.push_back(p);
  return out;
}

// Every matrix, and so every row, starts at a multiple of 64 elements: aligned for the
// kernels' vector loads and for the copies of whole rows.
int64_t aligned(int64_t elems) {
  return (elems + 63) / 64 * 64;
}

}  // namespace

LoraArenaShape Decoder::plan_lora(int32_t max_rank) {
  TACHYON_CHECK(max_rank > 0 && lora_shape_.max_rank == 0, "plan_lora({}) once", max_rank);
  const int64_t R = max_rank;
  int64_t offset = 0;
  int32_t entries = 0;
  for (int l = 0; l < cfg_.layer_num; ++l) {
    LayerWeights& L = w_.layers[static_cast<size_t>(l)];
    const QkvLayout& q = layouts_[static_cast<size_t>(l)];
    const bool mlp = cfg_.has_mlp(l) && !cfg_.is_moe(l);
    for (LinearWeights* p : adaptable(L, mlp)) {
      LoraTarget& t = p->lora;
      t.n = p->w.dim(0);
      t.k = p->w.dim(1);
      if (p == &L.qkv) {
        t.parts = 3;
        t.part_end[0] = q.q_cols();
        t.part_end[1] = q.q_cols() + q.kv_cols();
        t.part_end[2] = q.row_cols();
      } else if (p == &L.gate_up) {
        t.parts = 2;
        t.part_end[0] = t.n / 2;
        t.part_end[1] = t.n;
      } else {
        t.parts = 1;
        t.part_end[0] = t.n;
      }
      t.rank_index = entries;
      entries += t.parts;
      t.a_offset = offset;
      offset = aligned(offset + t.parts * R * t.k);
      t.b_offset = offset;
      offset = aligned(offset + t.n * R);
    }
  }
  build_layer_inputs();  // the layer inputs carry the products' targets
  lora_shape_ = LoraArenaShape{max_rank, offset, entries};
  return lora_shape_;
}

void Decoder::pack_lora(const LoraAdapter& adapter, std::span<float> row,
                        std::span<int32_t> ranks) const {
  const LoraArenaShape& shape = lora_shape_;
  TACHYON_CHECK(shape.max_rank > 0 && static_cast<int64_t>(row.size()) == shape.row_elems &&
                    static_cast<int32_t>(ranks.size()) == shape.rank_entries,
                "pack_lora: a row of {} and {} ranks for an arena of {} and {}", row.size(),
                ranks.size(), shape.row_elems, shape.rank_entries);
  std::fill(row.begin(), row.end(), 0.f);
  std::fill(ranks.begin(), ranks.end(), 0);
  const int64_t R = shape.max_rank;
  for (const LoraModule& m : adapter.modules) {
    if (m.layer < 0 || m.layer >= cfg_.layer_num)
      raise<InvalidArgument>("LoRA module {}: layer {} of {}", m.name, m.layer, cfg_.layer_num);
    const LayerWeights& L = w_.layers[static_cast<size_t>(m.layer)];
    const FoldedScales& folded = folded_scales_[static_cast<size_t>(m.layer)];
    // The product the module adapts, and which of its parts.
    const LinearWeights* p = nullptr;
    int first = 0, count = 1;
    const std::vector<float>* scale = nullptr;
    switch (m.slot) {
      case Slot::kQ:
      case Slot::kK:
      case Slot::kV: {
        const int i = m.slot == Slot::kQ ? 0 : m.slot == Slot::kK ? 1 : 2;
        p = L.qkv ? &L.qkv : i == 0 ? &L.q : i == 1 ? &L.k : &L.v;
        first = L.qkv ? i : 0;
        scale = &folded.attn;
        break;
      }
      case Slot::kQkv:
        p = &L.qkv;
        count = 3;
        scale = &folded.attn;
        break;
      case Slot::kO:
        p = &L.o;
        break;
      case Slot::kGate:
      case Slot::kUp: {
        const int i = m.slot == Slot::kGate ? 0 : 1;
        p = L.gate_up ? &L.gate_up : i == 0 ? &L.gate : &L.up;
        first = L.gate_up ? i : 0;
        scale = &folded.mlp;
        break;
      }
      case Slot::kGateUp:
        p = &L.gate_up;
        count = 2;
        scale = &folded.mlp;
        break;
      case Slot::kDown:
        p = &L.down;
        break;
      default:
        break;
    }
    if (p == nullptr || !*p || !p->lora || first + count > p->lora.parts)
      raise<InvalidArgument>(
          "LoRA module {} ({} of layer {}): the model has no such product to adapt", m.name,
          slot_name(m.slot), m.layer);
    const LoraTarget& t = p->lora;
    const int64_t r = m.rank(), K = t.k;
    if (r <= 0 || r > R)
      raise<InvalidArgument>("LoRA module {}: rank {} past the largest the server takes ({})",
                             m.name, r, R);
    int64_t rows = 0;  // B's rows: the parts' columns
    for (int pp = first; pp < first + count; ++pp)
      rows += t.part_end[pp] - (pp > 0 ? t.part_end[pp - 1] : 0);
    TACHYON_CHECK(m.a.dim(1) == K && m.b.dim(0) == rows && m.b.dim(1) == r,
                  "LoRA module {}: A {} and B {} for a product [{}, {}]", m.name, m.a.str(),
                  m.b.str(), rows, K);
    const bool folds = scale != nullptr && !scale->empty();
    const float* a = m.a.data<float>();
    const float* b = m.b.data<float>();
    int64_t b_row = 0;
    for (int pp = first; pp < first + count; ++pp) {
      int32_t& rank = ranks[static_cast<size_t>(t.rank_index + pp)];
      if (rank != 0)
        raise<InvalidArgument>("LoRA module {}: {} of layer {} is adapted twice", m.name,
                               slot_name(m.slot), m.layer);
      rank = static_cast<int32_t>(r);
      float* ra = row.data() + t.a_offset + pp * R * K;
      for (int64_t j = 0; j < r; ++j)
        for (int64_t c = 0; c < K; ++c)
          ra[j * K + c] = a[j * K + c] * (folds ? (*scale)[static_cast<size_t>(c)] : 1.f);
      const int64_t c0 = pp > 0 ? t.part_end[pp - 1] : 0;
      float* rb = row.data() + t.b_offset;
      for (int64_t c = c0; c < t.part_end[pp]; ++c, ++b_row)
        for (int64_t j = 0; j < r; ++j) rb[c * R + j] = b[b_row * r + j];
    }
  }
}

}  // namespace tachyon
