// ModelConfig: one framework-wide vocabulary for every architecture. Each family's
// mapping (src/model/arch/*.cc) turns the checkpoint's config.json into this; the
// decoder reads only these fields, never architecture names.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/dtype.h"
#include "core/json.h"
#include "model/quant_config.h"

namespace tachyon {

struct VisionModelConfig;  // model/vision/vision_config.h

enum class PositionType : uint8_t { kNone, kRotary, kAlibi, kLearned };
enum class AlibiStyle : uint8_t { kBloom, kMpt };
// kQwenDynamic: Qwen-1's dynamic NTK. The base grows by alpha^(dim / (dim - 2)) with
// alpha = max(1, 2^ceil(log2(L / original_max_position) + 1) - 1), where L is the length
// of the sequence's prompt (the first forward over it); decoding keeps that alpha.
enum class RopeType : uint8_t {
  kDefault,
  kLinear,
  kDynamic,
  kYarn,
  kLongrope,
  kLlama3,
  kQwenDynamic,
};

struct RopeConfig {
  RotaryStyle style = RotaryStyle::kHalf;
  int32_t dim = 0;  // rotated dims per head (even, <= head_dim)
  double theta = 10000.0;
  RopeType type = RopeType::kDefault;
  double factor = 1.0;
  // The pre-extension context length (yarn, longrope, llama3); dynamic NTK uses
  // max_position_embeddings.
  int64_t original_max_position = 0;
  int64_t max_position_embeddings = 0;
  double low_freq_factor = 1.0;                   // llama3
  double high_freq_factor = 4.0;                  // llama3
  double beta_fast = 32.0;                        // yarn
  double beta_slow = 1.0;                         // yarn
  double mscale = 0.0;                            // yarn (0 = unset)
  double mscale_all_dim = 0.0;                    // yarn (0 = unset)
  bool truncate = true;                           // yarn
  std::optional<double> attention_factor;         // yarn, longrope
  std::vector<double> short_factor, long_factor;  // longrope, dim / 2 each
  // The inverse frequencies rounded to float16, as a modeling file that stores them in
  // half precision has them (ChatGLM-6B's RotaryEmbedding: inv_freq.half()).
  bool inv_freq_f16 = false;
};

// How a prompt's special tokens lay it out (ChatGLM-6B): its context ends at the first
// context_end_token (<sop>), and the first of mask_token_ids found in the prompt, in
// that order of preference ([gMASK], then [MASK]), anchors the positions after it.
// model/prompt_layout.h computes a prompt's PromptLayout from these.
struct GlmPromptConfig {
  int64_t context_end_token = -1;
  std::vector<int64_t> mask_token_ids;
  bool enabled() const { return context_end_token >= 0; }
};

struct MoeConfig {
  int32_t num_experts = 0;
  int32_t top_k = 0;
  int64_t inter_size = 0;
  bool norm_topk_prob = false;
  int64_t shared_inter_size = 0;    // 0: no shared expert
  bool shared_expert_gate = false;  // shared output scaled by sigmoid(x . w)
};

struct GenerationDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
  std::optional<bool> do_sample;
};

struct ModelConfig {
  std::string architecture;  // architectures[0] (or the override)
  std::string model_type;
  std::string family;  // the registry entry that mapped it

  int32_t head_num = 0;
  int32_t head_num_kv = 0;
  int32_t size_per_head = 0;
  int32_t layer_num = 0;
  int64_t hidden_size = 0;
  int64_t inter_size = 0;
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;

  // Norms.
  NormType norm_type = NormType::kRMSNorm;
  double norm_eps = 1e-5;
  float norm_weight_offset = 0.f;  // Gemma: (1 + w)
  bool post_norm = false;          // norm after the residual add (OPT-350m)
  bool sandwich_norm = false;      // extra norms on the attention and MLP outputs (Gemma2)
  bool embedding_norm = false;     // norm right after the embedding (Bloom)
  bool final_norm = true;
  bool qk_norm = false;  // per-head RMSNorm on q and k (Qwen3)

  // MLP.
  Activation activation = Activation::kSilu;
  bool gated_mlp = true;  // down(act(gate(x)) * up(x)), else down(act(up(x)))

  // Biases.
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool lm_head_bias = false;

  // Positions.
  PositionType position = PositionType::kRotary;
  RopeConfig rope;
  int32_t learned_pos_offset = 0;  // OPT: 2
  GlmPromptConfig glm_prompt;
  AlibiStyle alibi_style = AlibiStyle::kBloom;
  double alibi_bias_max = 8.0;
  bool alibi_scaled = false;  // bias multiplied by the softmax scale (Falcon)
  bool alibi_bf16 = false;    // slopes and biases rounded to bfloat16 (Falcon)

  // Attention.
  double attn_scale = 0.0;                // 0: 1 / sqrt(size_per_head)
  bool attn_scale_inverse_layer = false;  // also divide by (layer + 1) (GPT-2 option)
  double attn_softcap = 0.0;
  double final_softcap = 0.0;
  double clip_qkv = 0.0;
  int32_t sliding_window = 0;
  std::vector<uint8_t> layer_sliding;  // [layer_num]: 1 where the window applies
  // > 0: a query at position p with p + 1 > logn_scaling_len is multiplied by
  // log(p + 1) / log(logn_scaling_len) (Qwen-1's use_logn_attn).
  int64_t logn_scaling_len = 0;

  // The prompt's context (PromptLayout::context_len tokens) attends in both directions, a
  // prefix LM (ChatGLM-6B); the tokens after it attend causally.
  bool bidirectional_context = false;

  // Residual layout.
  bool parallel_residual = false;     // x + attn(n1(x)) + mlp(n2(x))
  bool parallel_shared_norm = false;  // n2 is n1 (GPT-J, Phi, old Falcon)
  // The residual is the norm's output scaled, not its input (ChatGLM-6B):
  // h = s * n1(x) + attn(n1(x)), out = s * n2(h) + mlp(n2(h)), s = residual_scale.
  bool residual_from_norm = false;
  double residual_scale = 1.0;

  // Per-layer shapes (a pruned model): [layer_num] each, or empty when every layer has
  // head_num, head_num_kv and inter_size. A layer of 0 heads has no attention (and no
  // KV cache), one of intermediate size 0 no MLP. Without layer_head_num_kv, a layer of
  // a model whose KV heads are its heads (no grouping) keeps that; otherwise it has
  // head_num_kv KV heads.
  std::vector<int32_t> layer_head_num;
  std::vector<int32_t> layer_head_num_kv;
  std::vector<int64_t> layer_inter_size;
  // [layer_num] each, or empty: 1 where the layer's attention (which then has 0 heads)
  // or MLP (intermediate size 0) is replaced by one linear map [hidden, hidden] of its
  // normed input, added to the residual (DeciLM's replace_with_linear; pre-norm only).
  std::vector<uint8_t> layer_linear_attn;
  std::vector<uint8_t> layer_linear_mlp;

  // Mixture of experts.
  MoeConfig moe;
  std::vector<uint8_t> layer_moe;  // [layer_num]: 1 where the MLP is the MoE block

  // Embeddings.
  bool tie_word_embeddings = false;
  bool lm_head_normalized = false;  // lm_head rows L2-normalised (Baichuan2's NormHead)
  // The fused qkv weight is stored per head ([head][q, k, v]) where a config flag, not
  // the head counts, says so (ChatGLM without multi_query_attention). Read by mappings.
  bool qkv_per_head_layout = false;
  double embedding_scale = 1.0;     // Gemma: sqrt(hidden)
  int64_t word_embed_proj_dim = 0;  // OPT: embedding width when != hidden (0: hidden)

  // Special tokens.
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> pad_token_id;

  DType dtype = DType::kF32;  // the checkpoint's declared dtype
  QuantConfig quant;          // the checkpoint's quantization (none: 16/32-bit weights)
  // A multimodal model's image side (LLaVA: the vision tower and projector); null for a
  // text model.
  std::shared_ptr<const VisionModelConfig> vision;
  GenerationDefaults generation;

  int64_t embed_dim() const { return word_embed_proj_dim > 0 ? word_embed_proj_dim : hidden_size; }
  // Layer l's query heads, KV heads and intermediate size (the per-layer shapes).
  int32_t heads(int layer) const;
  int32_t kv_heads(int layer) const;
  int64_t inter(int layer) const;
  bool has_attention(int layer) const { return heads(layer) > 0; }
  bool linear_attention(int layer) const {
    return !layer_linear_attn.empty() && layer_linear_attn[layer] != 0;
  }
  bool linear_mlp(int layer) const {
    return !layer_linear_mlp.empty() && layer_linear_mlp[layer] != 0;
  }
  bool has_mlp(int layer) const { return is_moe(layer) || inter(layer) > 0; }
  bool per_layer_shapes() const {
    return !layer_head_num.empty() || !layer_head_num_kv.empty() || !layer_inter_size.empty() ||
           !layer_linear_attn.empty() || !layer_linear_mlp.empty();
  }
  int64_t q_size(int layer) const { return int64_t{heads(layer)} * size_per_head; }
  int64_t kv_size(int layer) const { return int64_t{kv_heads(layer)} * size_per_head; }
  bool is_sliding(int layer) const {
    return sliding_window > 0 && (layer_sliding.empty() || layer_sliding[layer] != 0);
  }
  bool is_moe(int layer) const { return !layer_moe.empty() && layer_moe[layer] != 0; }
  // GLM's 2-D positions (rotary style kHalf2D): the first half of each head turns by the
  // position, the second by the block position; (i, 0) for a token at index i inside the
  // prompt's context, (mask position, i - context_len + 1) from there on (PromptLayout).
  bool glm_2d_positions() const {
    return position == PositionType::kRotary && rope.style == RotaryStyle::kHalf2D;
  }
  // Whether a step needs each sequence's PromptLayout (ForwardBatch::layouts).
  bool needs_prompt_layout() const { return glm_2d_positions() || bidirectional_context; }
  double softmax_scale(int layer) const;

  // Checks internal consistency; throws InvalidArgument naming the field.
  void validate() const;
  // A JSON description (for `tachyon inspect` and logs).
  Json to_json() const;
};

std::string_view activation_name(Activation act);
std::string_view rope_type_name(RopeType type);

}  // namespace tachyon
