// GPT-BigCode / StarCoder: GPT-2's block with Linear (not Conv1D) weights and
// multi-query attention (one shared K/V head) in a fused c_attn [q; k; v].
#include "model/arch/arch.h"
#include "model/arch/common.h"

namespace tachyon::arch {

ArchSpec gpt_bigcode_spec() {
  ArchSpec s;
  s.family = "gpt_bigcode";
  s.architectures = {"GPTBigCodeForCausalLM"};
  s.model_types = {"gpt_bigcode"};
  s.map_config = [](const HfConfig& cfg) {
    ModelConfig mc;
    mc.hidden_size = cfg.require_size({"n_embd", "hidden_size"});
    const int64_t heads = cfg.require_size({"n_head", "num_attention_heads"});
    mc.head_num = to_i32(heads, "n_head");
    mc.size_per_head = head_dim_of(cfg, mc.hidden_size, heads, "n_embd", "n_head", {});
    mc.head_num_kv = cfg.bool_or({"multi_query"}, true) ? 1 : mc.head_num;
    mc.layer_num = to_i32(cfg.require_size({"n_layer", "num_hidden_layers"}), "n_layer");
    mc.vocab_size = cfg.require_size({"vocab_size"});
    mc.max_seq_len = cfg.size_or({"n_positions", "max_position_embeddings"}, 1024);
    mc.inter_size = cfg.size_or({"n_inner"}, 4 * mc.hidden_size);
    mc.norm_type = NormType::kLayerNorm;
    mc.norm_eps = cfg.double_or({"layer_norm_epsilon"}, 1e-5);
    mc.activation =
        parse_activation(cfg.get_string({"activation_function"}).value_or("gelu_pytorch_tanh"), cfg,
                         "activation_function");
    mc.gated_mlp = false;
    mc.qkv_bias = mc.o_bias = mc.mlp_bias = true;
    mc.position = PositionType::kLearned;
    if (!cfg.bool_or({"scale_attn_weights"}, true)) mc.attn_scale = 1.0;
    read_common(cfg, mc, true);
    return mc;
  };
  s.map_weights = [](const ModelConfig& mc) {
    const std::string l = "transformer.h.{L}.";
    // Without multi-query the fused rows are per head [q, k, v].
    const auto qkv_t = mc.head_num_kv == 1 ? WeightTransform::kNone : WeightTransform::kQkvPerHead;
    return WeightMap{
        {Slot::kEmbedding, {"transformer.wte.weight"}},
        {Slot::kPosEmbedding, {"transformer.wpe.weight"}},
        {Slot::kAttnNorm, {l + "ln_1.weight"}},
        {Slot::kAttnNormBias, {l + "ln_1.bias"}},
        {Slot::kQkv, {l + "attn.c_attn.weight", qkv_t}},
        {Slot::kQkvBias, {l + "attn.c_attn.bias", qkv_t}},
        {Slot::kO, {l + "attn.c_proj.weight"}},
        {Slot::kOBias, {l + "attn.c_proj.bias"}},
        {Slot::kMlpNorm, {l + "ln_2.weight"}},
        {Slot::kMlpNormBias, {l + "ln_2.bias"}},
        {Slot::kUp, {l + "mlp.c_fc.weight"}},
        {Slot::kUpBias, {l + "mlp.c_fc.bias"}},
        {Slot::kDown, {l + "mlp.c_proj.weight"}},
        {Slot::kDownBias, {l + "mlp.c_proj.bias"}},
        {Slot::kFinalNorm, {"transformer.ln_f.weight"}},
        {Slot::kFinalNormBias, {"transformer.ln_f.bias"}},
        {Slot::kLmHead, {"lm_head.weight", WeightTransform::kNone, true}},
    };
  };
  return s;
}

}  // namespace tachyon::arch
