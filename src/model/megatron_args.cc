// A Megatron-LM run's argparse.Namespace mapped onto ModelConfig (model/megatron.h):
// GPT-style runs (LayerNorm, GELU, learned positions, biases) and Llama-style ones
// (RMSNorm, SwiGLU, rotary, grouped-query attention) alike.
#include <cmath>

#include "core/error.h"
#include "model/megatron.h"

namespace tachyon {

namespace {

using K = PyValue::Kind;

// Typed access to the namespace's fields; None counts as absent.
class ArgReader {
 public:
  ArgReader(const PyValue& ns, const std::string& file) : ns_(ns), file_(file) {}

  const PyValue* find(std::string_view name) const {
    const PyValue* v = ns_.attr(name);
    return v && v->kind != K::kNone ? v : nullptr;
  }
  [[noreturn]] void bad(std::string_view name, const PyValue& v, std::string_view want) const {
    raise<InvalidArgument>("{}: args.{} is {}, not {}", file_, name, v.describe(), want);
  }
  std::optional<int64_t> get_int(std::string_view name) const {
    const PyValue* v = find(name);
    if (!v) return std::nullopt;
    if (v->kind == K::kInt) return v->i;
    if (v->kind == K::kFloat && v->f == std::floor(v->f) && std::abs(v->f) < 1e15)
      return static_cast<int64_t>(v->f);
    bad(name, *v, "an int");
  }
  int64_t size(std::string_view name) const {
    auto v = get_int(name);
    if (!v) raise<InvalidArgument>("{}: args has no {} (required)", file_, name);
    return positive(name, *v);
  }
  int64_t size_or(std::string_view name, int64_t fallback) const {
    auto v = get_int(name);
    return v ? positive(name, *v) : fallback;
  }
  int64_t positive(std::string_view name, int64_t v) const {
    if (v <= 0 || v > (int64_t{1} << 31))
      raise<InvalidArgument>("{}: args.{} = {} is out of range", file_, name, v);
    return v;
  }
  double number_or(std::string_view name, double fallback) const {
    const PyValue* v = find(name);
    if (!v) return fallback;
    if (v->kind == K::kFloat) return v->f;
    if (v->kind == K::kInt) return static_cast<double>(v->i);
    bad(name, *v, "a number");
  }
  bool flag(std::string_view name, bool fallback = false) const {
    const PyValue* v = find(name);
    if (!v) return fallback;
    if (v->kind != K::kBool) bad(name, *v, "a bool");
    return v->i != 0;
  }
  std::optional<std::string> str(std::string_view name) const {
    const PyValue* v = find(name);
    if (!v) return std::nullopt;
    if (v->kind != K::kStr) bad(name, *v, "a str");
    return v->s;
  }
  const std::string& file() const { return file_; }

 private:
  const PyValue& ns_;
  const std::string& file_;
};

// params_dtype (torch.bfloat16 ...), else the --bf16 / --fp16 switches.
DType read_dtype(const ArgReader& a) {
  if (const PyValue* v = a.find("params_dtype")) {
    if (v->kind != K::kGlobal) a.bad("params_dtype", *v, "a torch dtype");
    if (v->s == "torch.bfloat16") return DType::kBF16;
    if (v->s == "torch.float16") return DType::kF16;
    if (v->s == "torch.float32") return DType::kF32;
    a.bad("params_dtype", *v, "torch.bfloat16, torch.float16 or torch.float32");
  }
  if (a.flag("bf16")) return DType::kBF16;
  if (a.flag("fp16")) return DType::kF16;
  return DType::kF32;
}

void refuse_unsupported(const ArgReader& a) {
  auto refuse = [&](std::string_view what) {
    raise<InvalidArgument>("{}: {} is not supported for Megatron-LM checkpoints", a.file(), what);
  };
  if (a.get_int("num_experts").value_or(0) > 0) refuse("mixture of experts (args.num_experts)");
  if (a.find("virtual_pipeline_model_parallel_size"))
    refuse("the interleaved pipeline schedule (args.virtual_pipeline_model_parallel_size)");
  if (a.find("decoder_first_pipeline_num_layers") || a.find("decoder_last_pipeline_num_layers"))
    refuse("an uneven pipeline split (args.decoder_first/last_pipeline_num_layers)");
  if (a.flag("qk_layernorm")) refuse("args.qk_layernorm");
  if (a.flag("multi_latent_attention")) refuse("multi-latent attention");
  if (a.flag("squared_relu")) refuse("the squared ReLU activation (args.squared_relu)");
  if (a.flag("add_position_embedding") && a.str("position_embedding_type") == "rope")
    refuse("rotary and learned positions together");
}

}  // namespace

MegatronArgs read_megatron_args(const PyValue& root, const std::string& file) {
  if (!root.is_dict())
    raise<InvalidArgument>("{}: holds {}, not a Megatron checkpoint dict", file, root.describe());
  const PyValue* ns = root.get("args");
  if (!ns) raise<InvalidArgument>("{}: no 'args' in the checkpoint", file);
  if (ns->kind != K::kObject || ns->s != "argparse.Namespace" || !ns->state ||
      !ns->state->is_dict())
    raise<InvalidArgument>("{}: 'args' is {}, not an argparse.Namespace", file, ns->describe());
  const ArgReader a(*ns, file);
  refuse_unsupported(a);

  MegatronArgs out;
  if (const PyValue* v = root.get("checkpoint_version"); v && v->kind != K::kNone) {
    if (v->kind == K::kFloat)
      out.checkpoint_version = v->f;
    else if (v->kind == K::kInt)
      out.checkpoint_version = static_cast<double>(v->i);
    else
      raise<InvalidArgument>("{}: checkpoint_version is {}", file, v->describe());
  }
  out.tp = static_cast<int32_t>(a.size_or("tensor_model_parallel_size", 1));
  out.pp = static_cast<int32_t>(a.size_or("pipeline_model_parallel_size", 1));
  out.swiglu = a.flag("swiglu");

  ModelConfig& mc = out.config;
  mc.architecture = "MegatronLM";
  mc.model_type = "megatron";
  mc.family = "megatron";
  mc.layer_num = static_cast<int32_t>(a.size("num_layers"));
  mc.hidden_size = a.size("hidden_size");
  const int64_t heads = a.size("num_attention_heads");
  mc.head_num = static_cast<int32_t>(heads);
  mc.head_num_kv = mc.head_num;
  if (a.flag("group_query_attention"))
    mc.head_num_kv = static_cast<int32_t>(a.size("num_query_groups"));
  if (mc.hidden_size % heads != 0 && !a.get_int("kv_channels"))
    raise<InvalidArgument>("{}: hidden_size {} is not a multiple of num_attention_heads {}", file,
                           mc.hidden_size, heads);
  mc.size_per_head = static_cast<int32_t>(a.size_or("kv_channels", mc.hidden_size / heads));
  const int64_t default_ffn =
      out.swiglu ? static_cast<int64_t>(4 * mc.hidden_size * 2 / 3 / 64) * 64 : 4 * mc.hidden_size;
  mc.inter_size = a.size_or("ffn_hidden_size", default_ffn);
  out.padded_vocab = a.size("padded_vocab_size");
  mc.vocab_size = out.padded_vocab;

  const std::string norm = a.str("normalization").value_or("LayerNorm");
  if (norm == "LayerNorm")
    mc.norm_type = NormType::kLayerNorm;
  else if (norm == "RMSNorm")
    mc.norm_type = NormType::kRMSNorm;
  else
    raise<InvalidArgument>("{}: args.normalization '{}' is not LayerNorm or RMSNorm", file, norm);
  mc.norm_eps = a.number_or("norm_epsilon", a.number_or("layernorm_epsilon", 1e-5));
  if (a.flag("apply_layernorm_1p")) mc.norm_weight_offset = 1.f;

  mc.gated_mlp = out.swiglu;
  mc.activation = out.swiglu              ? Activation::kSilu
                  : a.flag("openai_gelu") ? Activation::kGeluTanh
                                          : Activation::kGelu;
  const bool bias = a.flag("add_bias_linear", true);
  mc.qkv_bias = bias || a.flag("add_qkv_bias");
  mc.o_bias = mc.mlp_bias = bias;
  mc.tie_word_embeddings = !a.flag("untie_embeddings_and_output_weights");
  if (a.flag("apply_residual_connection_post_layernorm")) {
    mc.residual_from_norm = true;  // h = n1(x) + attn(n1(x))
    mc.residual_scale = 1.0;
  }

  std::string pos = a.str("position_embedding_type").value_or("learned_absolute");
  if (!a.find("position_embedding_type") && a.flag("use_rotary_position_embeddings")) pos = "rope";
  const auto max_pos = a.get_int("max_position_embeddings");
  if (pos == "learned_absolute") {
    mc.position = PositionType::kLearned;
    mc.max_seq_len = a.size("max_position_embeddings");
  } else if (pos == "rope") {
    mc.position = PositionType::kRotary;
    mc.max_seq_len = max_pos ? a.size("max_position_embeddings") : a.size("seq_length");
    const double percent = a.number_or("rotary_percent", 1.0);
    if (!(percent > 0 && percent <= 1))
      raise<InvalidArgument>("{}: args.rotary_percent {} is not in (0, 1]", file, percent);
    mc.rope.dim = static_cast<int32_t>(mc.size_per_head * percent);
    mc.rope.theta = a.number_or("rotary_base", 10000.0);
    mc.rope.style = a.flag("rotary_interleaved") ? RotaryStyle::kInterleaved : RotaryStyle::kHalf;
    mc.rope.max_position_embeddings = mc.max_seq_len;
    const double interp = a.number_or("rotary_seq_len_interpolation_factor", 1.0);
    if (interp != 1.0) {
      mc.rope.type = RopeType::kLinear;
      mc.rope.factor = interp;
    }
  } else if (pos == "none") {
    mc.position = PositionType::kNone;
    mc.max_seq_len = max_pos ? *max_pos : a.size("seq_length");
  } else {
    raise<InvalidArgument>("{}: args.position_embedding_type '{}' is not supported", file, pos);
  }
  mc.dtype = read_dtype(a);
  if (mc.layer_num % out.pp != 0)
    raise<InvalidArgument>("{}: num_layers {} is not a multiple of the pipeline size {}", file,
                           mc.layer_num, out.pp);
  if (mc.head_num % out.tp != 0 || mc.head_num_kv % out.tp != 0 || mc.inter_size % out.tp != 0 ||
      out.padded_vocab % out.tp != 0)
    raise<InvalidArgument>(
        "{}: heads {}, query groups {}, ffn size {} and padded vocabulary {} must divide by the "
        "tensor-parallel size {}",
        file, mc.head_num, mc.head_num_kv, mc.inter_size, out.padded_vocab, out.tp);
  try {
    mc.validate();
  } catch (const InvalidArgument& e) {
    raise<InvalidArgument>("{}: {}", file, e.what());
  }
  return out;
}

int64_t megatron_vocab(const MegatronArgs& args, int64_t vocab_size, const std::string& dir) {
  if (vocab_size <= 0) return args.padded_vocab;
  if (vocab_size > args.padded_vocab)
    raise<InvalidArgument>("{}: the tokenizer's {} tokens exceed the padded vocabulary of {}", dir,
                           vocab_size, args.padded_vocab);
  return vocab_size;
}

}  // namespace tachyon
