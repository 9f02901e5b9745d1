// read_megatron_args on hand-built namespaces: the options the fixtures do not cover,
// and the refusals that name the file and the argument.
#include <gtest/gtest.h>

#include <memory>

#include "model/megatron.h"
#include "model/model_test_util.h"

namespace tachyon {
namespace {

using K = PyValue::Kind;
using testing_util::expect_invalid;

std::shared_ptr<PyValue> val(K kind) {
  auto v = std::make_shared<PyValue>();
  v->kind = kind;
  return v;
}
std::shared_ptr<PyValue> num(int64_t i) {
  auto v = val(K::kInt);
  v->i = i;
  return v;
}
std::shared_ptr<PyValue> flag(bool b) {
  auto v = val(K::kBool);
  v->i = b;
  return v;
}
std::shared_ptr<PyValue> str(const std::string& s, K kind = K::kStr) {
  auto v = val(kind);
  v->s = s;
  return v;
}

// A checkpoint dict whose args are a GPT-style namespace, with `fields` set over it.
class Ckpt {
 public:
  Ckpt() {
    set("num_layers", num(2));
    set("hidden_size", num(64));
    set("num_attention_heads", num(4));
    set("padded_vocab_size", num(256));
    set("max_position_embeddings", num(128));
  }
  Ckpt& set(const std::string& name, std::shared_ptr<PyValue> v) {
    for (size_t k = 0; k < fields_.size(); k += 2)
      if (fields_[k]->s == name) {
        fields_[k + 1] = std::move(v);
        return *this;
      }
    fields_.push_back(str(name));
    fields_.push_back(std::move(v));
    return *this;
  }
  PyValue root() const {
    auto state = val(K::kDict);
    state->items.assign(fields_.begin(), fields_.end());
    auto ns = str("argparse.Namespace", K::kObject);
    ns->state = state;
    PyValue r;
    r.kind = K::kDict;
    r.items = {str("args"), ns};
    return r;
  }
  MegatronArgs read() const { return read_megatron_args(root(), "shard.pt"); }

 private:
  std::vector<std::shared_ptr<const PyValue>> fields_;
};

TEST(MegatronArgs, GptDefaults) {
  const MegatronArgs a = Ckpt().read();
  const ModelConfig& c = a.config;
  EXPECT_EQ(c.inter_size, 256);  // 4 x hidden
  EXPECT_EQ(c.size_per_head, 16);
  EXPECT_EQ(c.head_num_kv, 4);
  EXPECT_EQ(c.norm_type, NormType::kLayerNorm);
  EXPECT_EQ(c.activation, Activation::kGelu);
  EXPECT_EQ(c.position, PositionType::kLearned);
  EXPECT_TRUE(c.qkv_bias && c.o_bias && c.mlp_bias && c.tie_word_embeddings);
  EXPECT_EQ(c.dtype, DType::kF32);
  EXPECT_EQ(a.tp, 1);
  EXPECT_EQ(a.checkpoint_version, 0);
}

TEST(MegatronArgs, OptionsMapOntoTheConfig) {
  Ckpt k;
  k.set("openai_gelu", flag(true)).set("apply_layernorm_1p", flag(true));
  k.set("apply_residual_connection_post_layernorm", flag(true));
  k.set("add_bias_linear", flag(false)).set("add_qkv_bias", flag(true));
  k.set("fp16", flag(true)).set("layernorm_epsilon", num(1));
  ModelConfig c = k.read().config;
  EXPECT_EQ(c.activation, Activation::kGeluTanh);
  EXPECT_EQ(c.norm_weight_offset, 1.f);
  EXPECT_TRUE(c.residual_from_norm);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias || c.mlp_bias);
  EXPECT_EQ(c.dtype, DType::kF16);
  EXPECT_EQ(c.norm_eps, 1.0);
  // Llama-style, partial rotary on old spelling; SwiGLU's default ffn size.
  Ckpt l;
  l.set("use_rotary_position_embeddings", flag(true)).set("swiglu", flag(true));
  l.set("normalization", str("RMSNorm")).set("group_query_attention", flag(true));
  l.set("num_query_groups", num(2)).set("rotary_base", num(500000));
  auto half = val(K::kFloat);
  half->f = 0.5;
  l.set("rotary_percent", half).set("params_dtype", str("torch.bfloat16", K::kGlobal));
  c = l.read().config;
  EXPECT_EQ(c.position, PositionType::kRotary);
  EXPECT_EQ(c.rope.dim, 8);
  EXPECT_EQ(c.rope.theta, 500000);
  EXPECT_EQ(c.inter_size, 128);  // int(4 * 64 * 2 / 3 / 64) * 64
  EXPECT_TRUE(c.gated_mlp);
  EXPECT_EQ(c.activation, Activation::kSilu);
  EXPECT_EQ(c.head_num_kv, 2);
  EXPECT_EQ(c.dtype, DType::kBF16);
}

TEST(MegatronArgs, RefusalsNameTheFileAndTheArgument) {
  expect_invalid([] { Ckpt().set("num_experts", num(8)).read(); }, {"shard.pt", "num_experts"});
  expect_invalid([] { Ckpt().set("virtual_pipeline_model_parallel_size", num(2)).read(); },
                 {"shard.pt", "virtual_pipeline"});
  expect_invalid([] { Ckpt().set("normalization", str("ScaleNorm")).read(); },
                 {"shard.pt", "ScaleNorm"});
  expect_invalid([] { Ckpt().set("hidden_size", str("64")).read(); },
                 {"shard.pt", "args.hidden_size is str '64', not an int"});
  expect_invalid([] { Ckpt().set("num_layers", num(-1)).read(); }, {"args.num_layers = -1"});
  expect_invalid([] { Ckpt().set("params_dtype", str("torch.int8", K::kGlobal)).read(); },
                 {"params_dtype", "torch.int8"});
  expect_invalid([] { Ckpt().set("tensor_model_parallel_size", num(3)).read(); },
                 {"tensor-parallel size 3"});
  expect_invalid([] { Ckpt().set("pipeline_model_parallel_size", num(4)).read(); },
                 {"num_layers 2 is not a multiple of the pipeline size 4"});
  expect_invalid([] { Ckpt().set("position_embedding_type", str("alibi")).read(); },
                 {"position_embedding_type 'alibi'"});
  // Not a namespace, or no checkpoint dict at all.
  PyValue evil;
  evil.kind = K::kDict;
  evil.items = {str("args"), str("posix.system", K::kObject)};
  expect_invalid([&] { read_megatron_args(evil, "shard.pt"); },
                 {"shard.pt", "posix.system(...)", "not an argparse.Namespace"});
  expect_invalid([] { read_megatron_args(PyValue{}, "shard.pt"); }, {"shard.pt", "None"});
}

}  // namespace
}  // namespace tachyon
