// GPT-J: interleaved rotary on the first rotary_dim dims, one LayerNorm feeding
// attention and MLP in parallel, unbiased q/k/v/out, biased MLP and lm_head.
#include "model/arch/arch.h"
#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {

ArchSpec gptj_spec() {
  ArchSpec s;
  s.family = "gptj";
  s.architectures = {"GPTJForCausalLM"};
  s.model_types = {"gptj"};
  s.map_config = [](const HfConfig& cfg) {
    ModelConfig mc;
    mc.hidden_size = cfg.require_size({"n_embd", "hidden_size"});
    const int64_t heads = cfg.require_size({"n_head", "num_attention_heads"});
    mc.head_num = mc.head_num_kv = to_i32(heads, "n_head");
    mc.size_per_head = head_dim_of(cfg, mc.hidden_size, heads, "n_embd", "n_head", {});
    mc.layer_num = to_i32(cfg.require_size({"n_layer", "num_hidden_layers"}), "n_layer");
    mc.vocab_size = cfg.require_size({"vocab_size"});
    mc.max_seq_len = cfg.size_or({"n_positions", "max_position_embeddings"}, 2048);
    mc.inter_size = cfg.size_or({"n_inner"}, 4 * mc.hidden_size);
    mc.norm_type = NormType::kLayerNorm;
    mc.norm_eps = cfg.double_or({"layer_norm_epsilon"}, 1e-5);
    mc.activation = parse_activation(cfg.get_string({"activation_function"}).value_or("gelu_new"),
                                     cfg, "activation_function");
    mc.gated_mlp = false;
    mc.mlp_bias = mc.lm_head_bias = true;
    mc.parallel_residual = true;
    mc.parallel_shared_norm = true;
    read_common(cfg, mc, false);
    mc.position = PositionType::kRotary;
    mc.rope.style = RotaryStyle::kInterleaved;
    mc.rope.theta = 10000.0;
    mc.rope.max_position_embeddings = mc.max_seq_len;
    mc.rope.dim = to_i32(cfg.size_or({"rotary_dim"}, 64), "rotary_dim");
    if (mc.rope.dim > mc.size_per_head || mc.rope.dim % 2 != 0)
      raise<InvalidArgument>(
          "{}: field 'rotary_dim' ({}) must be even and at most the head size ({})", cfg.source(),
          mc.rope.dim, mc.size_per_head);
    return mc;
  };
  s.map_weights = [](const ModelConfig&) {
    const std::string l = "transformer.h.{L}.";
    return WeightMap{
        {Slot::kEmbedding, {"transformer.wte.weight"}},
        {Slot::kAttnNorm, {l + "ln_1.weight"}},
        {Slot::kAttnNormBias, {l + "ln_1.bias"}},
        {Slot::kQ, {l + "attn.q_proj.weight"}},
        {Slot::kK, {l + "attn.k_proj.weight"}},
        {Slot::kV, {l + "attn.v_proj.weight"}},
        {Slot::kO, {l + "attn.out_proj.weight"}},
        {Slot::kUp, {l + "mlp.fc_in.weight"}},
        {Slot::kUpBias, {l + "mlp.fc_in.bias"}},
        {Slot::kDown, {l + "mlp.fc_out.weight"}},
        {Slot::kDownBias, {l + "mlp.fc_out.bias"}},
        {Slot::kFinalNorm, {"transformer.ln_f.weight"}},
        {Slot::kFinalNormBias, {"transformer.ln_f.bias"}},
        {Slot::kLmHead, {"lm_head.weight", WeightTransform::kNone, true}},
        {Slot::kLmHeadBias, {"lm_head.bias"}},
    };
  };
  return s;
}

}  // namespace tachyon::arch
