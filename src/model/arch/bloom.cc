// Bloom: ALiBi, a LayerNorm right after the embedding, per-head interleaved qkv,
// GELU(tanh) MLP, biases everywhere, tied embeddings.
#include "model/arch/arch.h"
#include "model/arch/common.h"

#include "core/error.h"

namespace tachyon::arch {

ArchSpec bloom_spec() {
  ArchSpec s;
  s.family = "bloom";
  s.architectures = {"BloomForCausalLM", "BloomModel"};
  s.model_types = {"bloom"};
  s.map_config = [](const HfConfig& cfg) {
    ModelConfig mc;
    mc.hidden_size = cfg.require_size({"hidden_size", "n_embed"});
    const int64_t heads = cfg.require_size({"n_head", "num_attention_heads"});
    mc.head_num = mc.head_num_kv = to_i32(heads, "n_head");
    mc.size_per_head = head_dim_of(cfg, mc.hidden_size, heads, "hidden_size", "n_head", {});
    mc.layer_num = to_i32(cfg.require_size({"n_layer", "num_hidden_layers"}), "n_layer");
    mc.vocab_size = cfg.require_size({"vocab_size"});
    mc.inter_size = 4 * mc.hidden_size;
    // ALiBi has no hard limit; the training length is the default bound.
    mc.max_seq_len = cfg.size_or({"seq_length", "max_position_embeddings"}, 2048);
    if (cfg.bool_or({"apply_residual_connection_post_layernorm"}, false))
      raise<InvalidArgument>(
          "{}: field 'apply_residual_connection_post_layernorm' = true is not supported",
          cfg.source());
    mc.norm_type = NormType::kLayerNorm;
    mc.norm_eps = cfg.double_or({"layer_norm_epsilon"}, 1e-5);
    mc.embedding_norm = true;
    mc.activation = Activation::kGeluTanh;
    mc.gated_mlp = false;
    mc.qkv_bias = mc.o_bias = mc.mlp_bias = true;
    mc.position = PositionType::kAlibi;
    mc.alibi_style = AlibiStyle::kBloom;
    read_common(cfg, mc, true);
    return mc;
  };
  s.map_weights = [](const ModelConfig&) {
    WeightMap m = {
        {Slot::kEmbedding, {"transformer.word_embeddings.weight"}},
        {Slot::kEmbedNorm, {"transformer.word_embeddings_layernorm.weight"}},
        {Slot::kEmbedNormBias, {"transformer.word_embeddings_layernorm.bias"}},
        {Slot::kFinalNorm, {"transformer.ln_f.weight"}},
        {Slot::kFinalNormBias, {"transformer.ln_f.bias"}},
        {Slot::kLmHead, {"lm_head.weight", WeightTransform::kNone, true}},
    };
    add_megatron_layer(m, "transformer.h.{L}.", "self_attention", true);
    return m;
  };
  return s;
}

}  // namespace tachyon::arch
