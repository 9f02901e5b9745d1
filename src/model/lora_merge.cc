// merge_lora(): an adapter folded into the weights (W += B · A).
#include <fmt/format.h>

#include <map>

#include "core/error.h"
#include "core/quant.h"
#include "model/lora_adapter.h"

namespace tachyon {
namespace {

// The weight a module adds into: its own slot's, or the layer's stacked matrix (q/k/v in
// qkv, gate/up in gate_up) when the parts were stacked.
struct MergeTarget {
  Slot slot;
  LinearWeights LayerWeights::*own;
  LinearWeights LayerWeights::*stacked;  // null: none
};
constexpr MergeTarget kTargets[] = {
    {Slot::kQkv, &LayerWeights::qkv, nullptr},
    {Slot::kQ, &LayerWeights::q, &LayerWeights::qkv},
    {Slot::kK, &LayerWeights::k, &LayerWeights::qkv},
    {Slot::kV, &LayerWeights::v, &LayerWeights::qkv},
    {Slot::kO, &LayerWeights::o, nullptr},
    {Slot::kGateUp, &LayerWeights::gate_up, nullptr},
    {Slot::kGate, &LayerWeights::gate, &LayerWeights::gate_up},
    {Slot::kUp, &LayerWeights::up, &LayerWeights::gate_up},
    {Slot::kDown, &LayerWeights::down, nullptr},
};

// Null when the layer has neither.
LinearWeights* target_of(LayerWeights& L, const LoraModule& m, bool& stacked) {
  stacked = false;
  for (const MergeTarget& t : kTargets) {
    if (t.slot != m.slot) continue;
    if (L.*t.own) return &(L.*t.own);
    stacked = true;
    return t.stacked != nullptr && L.*t.stacked ? &(L.*t.stacked) : nullptr;
  }
  return nullptr;
}

}  // namespace

void merge_lora(ModelWeights& weights, const LoraAdapter& adapter) {
  struct Staged {
    DType dtype;
    Tensor f32;
  };
  // Every module checked and its sum computed before any weight changes.
  std::map<LinearWeights*, Staged> staged;
  for (const LoraModule& m : adapter.modules) {
    const std::string what = fmt::format("{}: module '{}'", adapter.path, m.name);
    if (m.layer < 0 || static_cast<size_t>(m.layer) >= weights.layers.size())
      raise<InvalidArgument>("{}: layer {} of a model of {} layers", what, m.layer,
                             weights.layers.size());
    bool stacked = false;
    LinearWeights* target = target_of(weights.layers[m.layer], m, stacked);
    if (target == nullptr)
      raise<InvalidArgument>("{}: the model has no weight {} in layer {}", what, slot_name(m.slot),
                             m.layer);
    const Tensor& w = target->w;
    if (quantized(w) != nullptr)
      raise<InvalidArgument>("{}: the weight {} is quantized ({}); merging needs f32, f16 or bf16",
                             what, slot_name(m.slot), w.dtype() == DType::kU8 ? "int" : "fp8");
    if (!w.device().is_cpu() ||
        !(w.dtype() == DType::kF32 || w.dtype() == DType::kF16 || w.dtype() == DType::kBF16))
      raise<InvalidArgument>(
          "{}: the weight {} is {} on the {}; merging needs f32, f16 or bf16 "
          "on the host",
          what, slot_name(m.slot), w.str(), w.device().is_cpu() ? "host" : "device");
    const int64_t n = m.b.dim(0), k = m.a.dim(1), r = m.rank();
    const int64_t row0 = stacked ? m.stacked_row : 0;
    if (w.ndim() != 2 || w.dim(1) != k || (stacked ? row0 + n > w.dim(0) : w.dim(0) != n))
      raise<InvalidArgument>("{}: B · A is [{}, {}] (from row {}); the weight {} is {}", what, n, k,
                             row0, slot_name(m.slot), w.str());
    auto [it, fresh] = staged.try_emplace(target, Staged{w.dtype(), {}});
    if (fresh) it->second.f32 = w.to(DType::kF32);
    float* dst = it->second.f32.data<float>();
    const float* a = m.a.data<float>();
    const float* b = m.b.data<float>();
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t i = 0; i < n; ++i) {
      std::fill(row.begin(), row.end(), 0.f);
      for (int64_t j = 0; j < r; ++j) {
        const float bij = b[i * r + j];
        const float* aj = a + j * k;
        for (int64_t c = 0; c < k; ++c) row[c] += bij * aj[c];
      }
      float* wrow = dst + (row0 + i) * k;
      for (int64_t c = 0; c < k; ++c) wrow[c] += row[c];
    }
  }
  for (auto& [target, s] : staged)
    target->w = s.dtype == DType::kF32 ? std::move(s.f32) : s.f32.to(s.dtype);
}

}  // namespace tachyon
