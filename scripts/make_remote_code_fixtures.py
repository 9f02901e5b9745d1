#!/usr/bin/python3
"""Conformance fixtures for the families whose checkpoints ship their own modeling code
(trust_remote_code): Aquila, Baichuan, the first ChatGLM-6B, ChatGLM2/3 and GLM-4
(ChatGLMModel), Qwen (first generation), InternLM, InternLM2, OpenELM and DeciLM /
Nemotron-NAS.

transformers cannot run these without their remote code, so every fixture is built from
the natively supported fixtures in tests/conformance/fixtures (Hugging Face reference
logits from transformers 5.17):

  * a *twin* is an exact renaming / merging of a native fixture's tensors into the remote
    layout (q/k/v merged into W_pack, c_attn or a per-group wqkv, key/value heads repeated
    for a multi-head-only layout, config fields renamed). It keeps the native fixture's
    reference.json / reference.safetensors;
  * where the remote family's mathematics has no native twin (ALiBi with RMSNorm and
    SwiGLU, Baichuan2's NormHead, Qwen's dynamic NTK and log-n scaling, InternLM's o_proj
    bias, GLM-4's rope_ratio, all of ChatGLM-6B: 2-D positions, the bidirectional prompt
    context, the residual from the scaled LayerNorm output), the reference is computed here
    by a float64 forward pass written from the published modeling code's definitions.

Every family forward below is a small port of the published modeling file (its weight
names, its splits and rearranges of the fused projections, its rotary and ALiBi tables),
run in float64 with a key/value cache, so that greedy decoding follows what the
published `generate()` computes. Before any fixture is written, each port is run on the
twins and must reproduce the native fixtures' Hugging Face logits and greedy tokens.

The weights are not kept as files (chatglm6b's float16 .bin shards aside, a format
case): each folder gets a weights.json manifest (scripts/fixture_weights.py; the format
is in tests/conformance/fixtures/README.md) from which the tests regenerate them bit for
bit. A twin's tensors are gathers of rows of its native fixture's seeded draws (found by
matching rows, checked exactly), and a twin's manifest names the native fixture whose
reference.safetensors it shares instead of a copy. baichuan2_13b's own random weights are
drawn with the manifest's float64 recipe (stream_fixture). Making fixtures needs torch;
regenerating their weights needs only numpy.

Run with Debian's python3-torch (1.13) and python3-numpy:
    /usr/bin/python3 scripts/make_remote_code_fixtures.py [--check] [--only NAME]...
--check rebuilds everything in memory and compares it with the files in the repository;
--only limits either to the fixtures named.
"""

import argparse
import json
import math
import os
import shutil
import sys

import torch

sys.dont_write_bytecode = True  # keep scripts/ free of __pycache__
from remote_code_ports import (BaichuanPort, ChatGLM6BPort, ChatGLMPort, InternLM2Port,
                               DeciLMPort, InternLMPort, LlamaPort, OpenELMPort, QwenPort, check_twin,
                               decilm_ffn_size, openelm_layer_shapes,
                               read_safetensors, load_native, run_case,
                               safetensors_bytes)
import fixture_weights  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FIXTURES = os.path.join(ROOT, "tests", "conformance", "fixtures")
F64 = torch.float64
torch.set_default_dtype(torch.float32)

# ----------------------------------------------------------------------------------------
# Tensor surgery
# ----------------------------------------------------------------------------------------
def repeat_kv_rows(w, kv_heads, heads, hd):
    """k/v projection rows of a grouped-query layer repeated into one per query head:
    query head h reads key/value head h // (heads / kv_heads), exactly as before."""
    rest = w.shape[1:]
    return w.reshape(kv_heads, hd, *rest).repeat_interleave(heads // kv_heads, 0).reshape(heads * hd, *rest)


def llama_mha(config, t):
    """The llama fixture with its key/value heads repeated (an exact multi-head twin)."""
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    hd = config["hidden_size"] // heads
    out = dict(t)
    for name in list(t):
        if name.endswith(("k_proj.weight", "v_proj.weight", "k_proj.bias", "v_proj.bias")):
            out[name] = repeat_kv_rows(t[name], kv, heads, hd)
    return out


def cast(t, dtype):
    return {k: v.to(dtype) for k, v in t.items()}


def stream_fixture(shapes, seed):
    """Scaled random weights as the native fixtures have them (matrices ~ N(0, 2/in),
    norm scales ~ 1 + N(0, 0.1^2), biases ~ N(0, 0.1^2), embeddings ~ N(0, 1)), drawn
    in float64 from one seeded stream in name order (fixture_weights.py's recipe, so the
    manifest regenerates them). Returns (tensors, the manifest stream)."""
    stream = fixture_weights.Stream(seed)
    out, spec = {}, {"seed": seed, "skip": 0, "tensors": []}
    for name, shape in sorted(shapes.items()):
        if len(shape) == 1 and name.endswith("norm.weight"):
            t = {"kind": "norm"}
        elif len(shape) == 1:
            t = {"kind": "scaled64", "std": 0.1}
        elif "embed" in name:
            t = {"kind": "scaled", "std": 1.0}
        else:
            t = {"kind": "scaled64", "std": (2.0 / shape[1]) ** 0.5}
        z = stream.normal(math.prod(shape))
        v = fixture_weights.value(t["kind"], t.get("std"), z)
        out[name] = torch.from_numpy(v.reshape(shape).copy())
        spec["tensors"].append(dict(name=name, shape=list(shape), **t))
    return out, spec


def random_like_fixture(shapes, seed):
    """Scaled random weights as the native fixtures have them (matrices ~ N(0, 1/in),
    norm scales ~ 1 + N(0, 0.1^2), embeddings ~ N(0, 1)), torch's float32 draws: only
    for chatglm6b, which stores its weights (its sharded .bin files are a format case)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in sorted(shapes.items()):
        if len(shape) == 1 and name.endswith("norm.weight"):
            out[name] = 1 + 0.1 * torch.randn(shape, generator=g)
        elif len(shape) == 1:
            out[name] = 0.1 * torch.randn(shape, generator=g)
        elif "embed" in name:
            out[name] = torch.randn(shape, generator=g)
        else:
            out[name] = torch.randn(shape, generator=g) * (2.0 / shape[1]) ** 0.5
    return out


# ----------------------------------------------------------------------------------------
# Fixture definitions
# ----------------------------------------------------------------------------------------
def fixture_list():
    llama_cfg, llama_t, llama_cases = load_native(os.path.join(FIXTURES, "llama"))
    qwen2_cfg, qwen2_t, qwen2_cases = load_native(os.path.join(FIXTURES, "qwen2"))
    glm_cfg, glm_t, glm_cases = load_native(os.path.join(FIXTURES, "glm"))
    layers = llama_cfg["num_hidden_layers"]
    H, KV, D = (llama_cfg["num_attention_heads"], llama_cfg["num_key_value_heads"],
                llama_cfg["hidden_size"])
    hd = D // H
    V, I = llama_cfg["vocab_size"], llama_cfg["intermediate_size"]
    mha = llama_mha(llama_cfg, llama_t)
    fixtures = []

    def add(name, config, tensors, port, source, cases=None, note="", prompt_lengths=None,
            fmt="safetensors", prompt_makers=None, port_on_twins=True, stream=None,
            unchecked=None):
        # port_on_twins: the port's class also runs a twin fixture (so its code is checked
        # against transformers there); False for a port of its own. stream: the manifest
        # stream the tensors were drawn from (stream_fixture), else they are gathers of a
        # native fixture's.
        fixtures.append({"name": name, "config": config, "tensors": tensors, "port": port,
                         "source": source, "cases": cases, "note": note,
                         "prompt_lengths": prompt_lengths, "format": fmt,
                         "prompt_makers": prompt_makers, "port_on_twins": port_on_twins,
                         "stream": stream})
        if unchecked:
            fixtures[-1]["unchecked"] = unchecked

    common = {"bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": D,
              "initializer_range": 0.02, "intermediate_size": I, "num_attention_heads": H,
              "num_hidden_layers": layers, "pad_token_id": 0, "tie_word_embeddings": False,
              "use_cache": True, "vocab_size": V}

    # --- Aquila (BAAI/Aquila-7B: AquilaModel, multi-head) and Aquila2 (AquilaForCausalLM).
    aquila = dict(common, architectures=["AquilaModel"],
                  auto_map={"AutoConfig": "configuration_aquila.AquilaConfig",
                            "AutoModelForCausalLM": "modeling_aquila.AquilaForCausalLM"},
                  max_position_embeddings=llama_cfg["max_position_embeddings"],
                  model_type="aquila", rms_norm_eps=llama_cfg["rms_norm_eps"],
                  torch_dtype="float32", transformers_version="4.28.1")
    add("aquila", aquila, mha, lambda c, t: LlamaPort(c, t), "llama",
        note="The llama fixture with its key/value heads repeated into the multi-head layout "
             "of the first Aquila.")
    aquila2 = dict(aquila, architectures=["AquilaForCausalLM"], num_key_value_heads=KV,
                   transformers_version="4.31.0")
    add("aquila2", aquila2, llama_t, lambda c, t: LlamaPort(c, t), "llama",
        note="The llama fixture unchanged (grouped-query, as Aquila2-34B), under Aquila2's "
             "config.")

    # --- Baichuan: W_pack = [q; k; v] rows (multi-head only).
    def w_pack(t):
        out = {}
        for name, w in t.items():
            if ".self_attn.q_proj." in name:
                p = name.replace("q_proj.weight", "")
                out[p + "W_pack.weight"] = torch.cat(
                    [t[p + "q_proj.weight"], t[p + "k_proj.weight"], t[p + "v_proj.weight"]], 0)
            elif ".self_attn.k_proj." in name or ".self_attn.v_proj." in name:
                continue
            else:
                out[name] = w
        return out

    baichuan_t = w_pack(mha)
    baichuan7 = dict(common, architectures=["BaiChuanForCausalLM"],
                     auto_map={"AutoConfig": "configuration_baichuan.BaiChuanConfig",
                               "AutoModelForCausalLM": "modeling_baichuan.BaiChuanForCausalLM"},
                     max_position_embeddings=llama_cfg["max_position_embeddings"],
                     model_type="baichuan", rms_norm_eps=llama_cfg["rms_norm_eps"],
                     torch_dtype="float32", transformers_version="4.29.1")
    add("baichuan", baichuan7, baichuan_t, lambda c, t: BaichuanPort(c, t, False, False), "llama",
        note="Baichuan-7B (BaiChuanForCausalLM): the llama fixture with its key/value heads "
             "repeated and q, k, v stacked into W_pack.")

    baichuan_auto = {"AutoConfig": "configuration_baichuan.BaichuanConfig",
                     "AutoModelForCausalLM": "modeling_baichuan.BaichuanForCausalLM"}
    baichuan2_7 = dict(common, _from_model_config=True, architectures=["BaichuanForCausalLM"],
                       auto_map=baichuan_auto, tokenizer_class="BaichuanTokenizer",
                       max_position_embeddings=llama_cfg["max_position_embeddings"],
                       model_max_length=llama_cfg["max_position_embeddings"],
                       model_type="baichuan", rms_norm_eps=llama_cfg["rms_norm_eps"],
                       torch_dtype="float32", transformers_version="4.29.2", z_loss_weight=0)
    add("baichuan2_7b", baichuan2_7, baichuan_t, lambda c, t: BaichuanPort(c, t, False, True),
        None, llama_cases,
        note="Baichuan2-7B: the baichuan twin's weights with Baichuan2's NormHead (lm_head rows "
             "L2-normalised at inference; the checkpoint stores them raw), float32, so that the "
             "normalisation is not blurred by rounding. The hub ships pytorch_model.bin; this "
             "fixture is generated as model.safetensors (gpt2 and chatglm6b cover the .bin "
             "formats).")

    baichuan13 = dict(common, _from_model_config=True, architectures=["BaichuanForCausalLM"],
                      auto_map=baichuan_auto, model_max_length=llama_cfg["max_position_embeddings"],
                      model_type="baichuan", rms_norm_eps=1e-06, torch_dtype="bfloat16",
                      transformers_version="4.29.2")
    add("baichuan_13b", baichuan13, cast(baichuan_t, torch.bfloat16),
        lambda c, t: BaichuanPort(c, t, True, False), None, llama_cases,
        note="Baichuan-13B: ALiBi (no rotary), the baichuan twin's weights rounded to bfloat16.")

    # Baichuan2-13B with 5 heads (hidden 80): a head count that is not a power of two,
    # as the 40 heads of the real model, exercises the interleaved extra slopes.
    D5, H5, I5 = 80, 5, 160
    shapes = {"model.embed_tokens.weight": [V, D5], "model.norm.weight": [D5],
              "lm_head.weight": [V, D5]}
    for i in range(layers):
        L = "model.layers.%d." % i
        shapes.update({L + "input_layernorm.weight": [D5], L + "post_attention_layernorm.weight": [D5],
                       L + "self_attn.W_pack.weight": [3 * D5, D5], L + "self_attn.o_proj.weight": [D5, D5],
                       L + "mlp.gate_proj.weight": [I5, D5], L + "mlp.up_proj.weight": [I5, D5],
                       L + "mlp.down_proj.weight": [D5, I5]})
    baichuan2_13 = dict(baichuan13, hidden_size=D5, num_attention_heads=H5, intermediate_size=I5,
                        tokenizer_class="BaichuanTokenizer", torch_dtype="float32", z_loss_weight=0)
    t13, stream13 = stream_fixture(shapes, 1313)
    add("baichuan2_13b", baichuan2_13, t13,
        lambda c, t: BaichuanPort(c, t, True, True), None, llama_cases, stream=stream13,
        note="Baichuan2-13B: ALiBi with 5 heads (not a power of two, as the real 40: the "
             "slopes interleave) and the NormHead; random weights scaled as the native "
             "fixtures', float32, generated as model.safetensors (the hub ships two "
             "pytorch_model-0000N-of-00002.bin shards; chatglm6b covers that format).")

    # --- ChatGLM (ChatGLM3-6B config) from the GLM-4 fixture (GlmForCausalLM).
    def chatglm_tensors(t, n_layers):
        out = {"transformer.embedding.word_embeddings.weight": t["model.embed_tokens.weight"],
               "transformer.encoder.final_layernorm.weight": t["model.norm.weight"],
               "transformer.output_layer.weight": t["lm_head.weight"]}
        ghd = glm_cfg["head_dim"]
        n_elem = ghd // 2
        out["transformer.rotary_pos_emb.inv_freq"] = (
            1.0 / (10000 ** (torch.arange(0, n_elem, 2, dtype=torch.float32) / n_elem))).to(
            t["model.norm.weight"].dtype)
        for i in range(n_layers):
            s, d = "model.layers.%d." % i, "transformer.encoder.layers.%d." % i
            out[d + "input_layernorm.weight"] = t[s + "input_layernorm.weight"]
            out[d + "post_attention_layernorm.weight"] = t[s + "post_attention_layernorm.weight"]
            for kind in ("weight", "bias"):
                out[d + "self_attention.query_key_value." + kind] = torch.cat(
                    [t[s + "self_attn.%s_proj.%s" % (p, kind)] for p in "qkv"], 0)
            out[d + "self_attention.dense.weight"] = t[s + "self_attn.o_proj.weight"]
            out[d + "mlp.dense_h_to_4h.weight"] = t[s + "mlp.gate_up_proj.weight"]
            out[d + "mlp.dense_4h_to_h.weight"] = t[s + "mlp.down_proj.weight"]
        return out

    chatglm_t = chatglm_tensors(glm_t, glm_cfg["num_hidden_layers"])
    chatglm_auto = {
        "AutoConfig": "configuration_chatglm.ChatGLMConfig",
        "AutoModel": "modeling_chatglm.ChatGLMForConditionalGeneration",
        "AutoModelForCausalLM": "modeling_chatglm.ChatGLMForConditionalGeneration",
        "AutoModelForSeq2SeqLM": "modeling_chatglm.ChatGLMForConditionalGeneration",
        "AutoModelForSequenceClassification": "modeling_chatglm.ChatGLMForSequenceClassification"}
    chatglm3 = {
        "model_type": "chatglm", "architectures": ["ChatGLMModel"], "auto_map": chatglm_auto,
        "add_bias_linear": False, "add_qkv_bias": True, "apply_query_key_layer_scaling": True,
        "apply_residual_connection_post_layernorm": False, "attention_dropout": 0.0,
        "attention_softmax_in_fp32": True, "bias_dropout_fusion": True,
        "ffn_hidden_size": glm_cfg["intermediate_size"], "fp32_residual_connection": False,
        "hidden_dropout": 0.0, "hidden_size": glm_cfg["hidden_size"],
        "kv_channels": glm_cfg["head_dim"], "layernorm_epsilon": glm_cfg["rms_norm_eps"],
        "multi_query_attention": True, "multi_query_group_num": glm_cfg["num_key_value_heads"],
        "num_attention_heads": glm_cfg["num_attention_heads"],
        "num_layers": glm_cfg["num_hidden_layers"], "original_rope": True,
        "padded_vocab_size": glm_cfg["vocab_size"], "post_layer_norm": True, "rmsnorm": True,
        "seq_length": glm_cfg["max_position_embeddings"], "use_cache": True,
        "torch_dtype": "float32", "transformers_version": "4.30.2", "tie_word_embeddings": False,
        "eos_token_id": 2, "pad_token_id": 0}
    add("chatglm3", chatglm3, chatglm_t, lambda c, t: ChatGLMPort(c, t), "glm",
        note="ChatGLM3-6B's config over the glm fixture (GlmForCausalLM, the GLM-4 "
             "architecture) renamed into the ChatGLM layout: q, k, v (with biases) stacked "
             "into query_key_value, gate_up_proj as dense_h_to_4h, lm_head as output_layer; "
             "the rotary inv_freq buffer the hub checkpoints carry is included.")

    glm4 = dict(chatglm3, attn_implementation="sdpa", classifier_dropout=None,
                eos_token_id=[V - 3, V - 2, V - 1], pad_token_id=V - 3,
                layernorm_epsilon=1.5625e-07, num_hidden_layers=glm_cfg["num_hidden_layers"],
                rope_ratio=500, torch_dtype="bfloat16", transformers_version="4.44.0",
                vocab_size=glm_cfg["vocab_size"])
    add("glm4_chatglm", glm4, cast(chatglm_t, torch.bfloat16), lambda c, t: ChatGLMPort(c, t),
        None, glm_cases,
        note="GLM-4-9B-Chat's config (ChatGLMModel with rope_ratio 500, three eos ids) over "
             "the chatglm3 twin's weights rounded to bfloat16.")

    # --- Qwen (first generation) from the qwen2 fixture: c_attn = [q; k; v] with bias,
    # multi-head only; mlp.w2 is the gate, w1 the up projection.
    qmha = llama_mha(qwen2_cfg, qwen2_t)
    qwen_t = {"transformer.wte.weight": qmha["model.embed_tokens.weight"],
              "transformer.ln_f.weight": qmha["model.norm.weight"],
              "lm_head.weight": qmha["lm_head.weight"]}
    for i in range(qwen2_cfg["num_hidden_layers"]):
        s, d = "model.layers.%d." % i, "transformer.h.%d." % i
        qwen_t[d + "ln_1.weight"] = qmha[s + "input_layernorm.weight"]
        qwen_t[d + "ln_2.weight"] = qmha[s + "post_attention_layernorm.weight"]
        for kind in ("weight", "bias"):
            qwen_t[d + "attn.c_attn." + kind] = torch.cat(
                [qmha[s + "self_attn.%s_proj.%s" % (p, kind)] for p in "qkv"], 0)
        qwen_t[d + "attn.c_proj.weight"] = qmha[s + "self_attn.o_proj.weight"]
        qwen_t[d + "mlp.w2.weight"] = qmha[s + "mlp.gate_proj.weight"]
        qwen_t[d + "mlp.w1.weight"] = qmha[s + "mlp.up_proj.weight"]
        qwen_t[d + "mlp.c_proj.weight"] = qmha[s + "mlp.down_proj.weight"]
    qwen = {"architectures": ["QWenLMHeadModel"],
            "auto_map": {"AutoConfig": "configuration_qwen.QWenConfig",
                         "AutoModelForCausalLM": "modeling_qwen.QWenLMHeadModel"},
            "attn_dropout_prob": 0.0, "bf16": False, "emb_dropout_prob": 0.0, "fp16": False,
            "fp32": False, "hidden_size": qwen2_cfg["hidden_size"],
            "intermediate_size": 2 * qwen2_cfg["intermediate_size"], "initializer_range": 0.02,
            "kv_channels": qwen2_cfg["hidden_size"] // qwen2_cfg["num_attention_heads"],
            "layer_norm_epsilon": qwen2_cfg["rms_norm_eps"],
            "max_position_embeddings": qwen2_cfg["max_position_embeddings"], "model_type": "qwen",
            "no_bias": True, "num_attention_heads": qwen2_cfg["num_attention_heads"],
            "num_hidden_layers": qwen2_cfg["num_hidden_layers"], "onnx_safe": None,
            "rotary_emb_base": qwen2_cfg["rope_theta"], "rotary_pct": 1.0,
            "scale_attn_weights": True, "seq_length": qwen2_cfg["max_position_embeddings"],
            "tie_word_embeddings": False, "tokenizer_class": "QWenTokenizer",
            "transformers_version": "4.32.0", "use_cache": True, "use_dynamic_ntk": True,
            "use_flash_attn": "auto", "use_logn_attn": True, "vocab_size": qwen2_cfg["vocab_size"]}
    add("qwen", qwen, qwen_t, lambda c, t: QwenPort(c, t), "qwen2",
        note="Qwen-7B's config over the qwen2 fixture (bfloat16) with its key/value heads "
             "repeated and renamed into the Qwen layout. seq_length covers every test "
             "sequence, so dynamic NTK and log-n scaling stay inactive, as in the published "
             "model below its training length.")
    qwen_long = dict(qwen, seq_length=8, max_position_embeddings=8)
    add("qwen_ntk", qwen_long, qwen_t, lambda c, t: QwenPort(c, t), None, None,
        prompt_lengths=[1, 6, 12, 23],
        note="The qwen twin with seq_length 8: every sequence runs past its training length, "
             "so dynamic NTK (alpha fixed by the prompt length: 1, 1, 3 and 7 for prompts of "
             "1, 6, 12 and 23 tokens) and log-n query scaling are active.")

    # --- InternLM (first generation): Llama + biases on q/k/v/o, `rotary` object.
    g = torch.Generator().manual_seed(20230706)
    internlm_t = dict(mha)
    for i in range(layers):
        L = "model.layers.%d.self_attn." % i
        for p, n in (("q", H * hd), ("k", H * hd), ("v", H * hd), ("o", D)):
            internlm_t[L + p + "_proj.bias"] = 0.2 * torch.randn(n, generator=g)
    internlm = dict(common, architectures=["InternLMForCausalLM"],
                    auto_map={"AutoConfig": "configuration_internlm.InternLMConfig",
                              "AutoModel": "modeling_internlm.InternLMForCausalLM",
                              "AutoModelForCausalLM": "modeling_internlm.InternLMForCausalLM"},
                    bias=True, max_position_embeddings=llama_cfg["max_position_embeddings"],
                    model_type="internlm", rms_norm_eps=llama_cfg["rms_norm_eps"],
                    rotary={"base": 10000, "type": "dynamic"}, torch_dtype="float16",
                    transformers_version="4.33.2")
    add("internlm", internlm, cast(internlm_t, torch.float16), lambda c, t: InternLMPort(c, t),
        None, llama_cases,
        note="InternLM-chat-7B's config: the multi-head llama weights plus random biases on "
             "q, k, v and o, rounded to float16.")

    # --- InternLM2: wqkv packed per key/value head [q x group, k, v].
    groups = H // KV
    internlm2_t = {"model.tok_embeddings.weight": llama_t["model.embed_tokens.weight"],
                   "model.norm.weight": llama_t["model.norm.weight"],
                   "output.weight": llama_t["lm_head.weight"]}
    for i in range(layers):
        s = "model.layers.%d." % i
        q = llama_t[s + "self_attn.q_proj.weight"].reshape(KV, groups, hd, D)
        k = llama_t[s + "self_attn.k_proj.weight"].reshape(KV, 1, hd, D)
        v = llama_t[s + "self_attn.v_proj.weight"].reshape(KV, 1, hd, D)
        internlm2_t[s + "attention.wqkv.weight"] = torch.cat([q, k, v], 1).reshape(-1, D)
        internlm2_t[s + "attention.wo.weight"] = llama_t[s + "self_attn.o_proj.weight"]
        internlm2_t[s + "attention_norm.weight"] = llama_t[s + "input_layernorm.weight"]
        internlm2_t[s + "ffn_norm.weight"] = llama_t[s + "post_attention_layernorm.weight"]
        internlm2_t[s + "feed_forward.w1.weight"] = llama_t[s + "mlp.gate_proj.weight"]
        internlm2_t[s + "feed_forward.w3.weight"] = llama_t[s + "mlp.up_proj.weight"]
        internlm2_t[s + "feed_forward.w2.weight"] = llama_t[s + "mlp.down_proj.weight"]
    internlm2 = dict(common, architectures=["InternLM2ForCausalLM"], attn_implementation="eager",
                     auto_map={"AutoConfig": "configuration_internlm2.InternLM2Config",
                               "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM",
                               "AutoModel": "modeling_internlm2.InternLM2ForCausalLM"},
                     bias=False, max_position_embeddings=llama_cfg["max_position_embeddings"],
                     model_type="internlm2", num_key_value_heads=KV, pad_token_id=2,
                     rms_norm_eps=llama_cfg["rms_norm_eps"],
                     rope_scaling={"type": "dynamic", "factor": 2.0},
                     rope_theta=llama_cfg.get("rope_theta", 10000), torch_dtype="float32",
                     transformers_version="4.33.2")
    add("internlm2", internlm2, internlm2_t, lambda c, t: InternLM2Port(c, t), "llama",
        note="InternLM2-chat-7B's config over the llama fixture: q, k, v packed into wqkv per "
             "key/value head ([q x 2, k, v]), renamed to tok_embeddings / attention / "
             "feed_forward / output. Dynamic NTK (factor 2) only acts past "
             "max_position_embeddings, which no test sequence reaches.")
    add_chatglm6b(add)
    add_openelm(add, V, llama_cases)
    add_decilm(add, V, llama_cases)
    natives = {"llama": llama_cases, "qwen2": qwen2_cases, "glm": glm_cases}
    return fixtures, natives


def add_openelm(add, vocab, cases):
    """OpenELM (OpenELMForCausalLM): layer-wise scaling over 4 layers, so that every layer
    has its own query heads, KV heads and FFN width; random weights of its own."""
    config = {
        "activation_fn_name": "swish", "architectures": ["OpenELMForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_openelm.OpenELMConfig",
                     "AutoModelForCausalLM": "modeling_openelm.OpenELMForCausalLM"},
        "bos_token_id": 1, "eos_token_id": 2, "ffn_dim_divisor": 32,
        "ffn_multipliers": [0.5, 4.0], "ffn_with_glu": True, "head_dim": 16,
        "initializer_range": 0.02, "max_context_length": 256, "model_dim": 128,
        "model_type": "openelm", "normalization_layer_name": "rms_norm",
        "normalize_qk_projections": True, "num_gqa_groups": 2, "num_transformer_layers": 4,
        "qkv_multipliers": [0.5, 1.0], "rope_freq_constant": 10000, "rope_max_length": 512,
        "share_input_output_layers": True, "torch_dtype": "float32",
        "transformers_version": "4.39.3", "use_cache": True, "vocab_size": vocab}
    heads, kv_heads, inter = openelm_layer_shapes(config)
    # As the config class saves them (its __post_init__ recomputes them on loading).
    config["num_query_heads"], config["num_kv_heads"] = heads, kv_heads
    D, hd = config["model_dim"], config["head_dim"]
    shapes = {"transformer.token_embeddings.weight": [vocab, D], "transformer.norm.weight": [D]}
    for i in range(config["num_transformer_layers"]):
        L = "transformer.layers.%d." % i
        shapes.update({
            L + "attn_norm.weight": [D], L + "ffn_norm.weight": [D],
            L + "attn.qkv_proj.weight": [(heads[i] + 2 * kv_heads[i]) * hd, D],
            L + "attn.q_norm.weight": [hd], L + "attn.k_norm.weight": [hd],
            L + "attn.out_proj.weight": [D, heads[i] * hd],
            L + "ffn.proj_1.weight": [2 * inter[i], D], L + "ffn.proj_2.weight": [D, inter[i]]})
    tensors, stream = stream_fixture(shapes, 2404)
    add("openelm", config, tensors, lambda c, t: OpenELMPort(c, t), None, cases, stream=stream,
        port_on_twins=False,
        unchecked="a port of its own, which runs on no twin: its per-layer shapes, q/k norms "
                  "and rotary applied after the cache are checked against the modeling code "
                  "by reading only",
        note="OpenELM (apple/OpenELM-270M's layout at hidden 128, head_dim 16, 4 layers): "
             "qkv_multipliers [0.5, 1.0] and ffn_multipliers [0.5, 4.0] give layers of %s "
             "query heads, %s KV heads and FFN widths %s; q/k RMSNorm, a gated FFN, the output "
             "layer shared with the embedding; random weights scaled as the native fixtures', "
             "float32." % (heads, kv_heads, inter))


def add_decilm(add, vocab, cases):
    """DeciLM / Nemotron-NAS (DeciLMForCausalLM): 5 layers whose block_configs cover every
    kind of block; random weights of its own."""
    def block(attn, ffn):
        a = {"n_heads_in_group": None, "no_op": False, "replace_with_linear": False,
             "sparsify": None}
        f = {"ffn_mult": None, "no_op": False, "replace_with_linear": False, "sparsify": None}
        a.update(attn)
        f.update(ffn)
        return {"attention": a, "ffn": f}

    blocks = [block({"n_heads_in_group": 2}, {"ffn_mult": 2.0}),
              block({"replace_with_linear": True}, {"ffn_mult": 1.0}),
              block({"n_heads_in_group": 4}, {"replace_with_linear": True}),
              block({"no_op": True}, {"ffn_mult": 7.0}),
              block({"n_heads_in_group": 1}, {"no_op": True})]
    D, H = 64, 4
    hd = D // H
    config = {
        "architectures": ["DeciLMForCausalLM"], "attention_bias": False,
        "auto_map": {"AutoConfig": "configuration_decilm.DeciLMConfig",
                     "AutoModelForCausalLM": "modeling_decilm.DeciLMForCausalLM"},
        "block_configs": blocks, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
        "hidden_size": D, "initializer_range": 0.02, "intermediate_size": None,
        "max_position_embeddings": 256, "mlp_bias": False, "model_type": "nemotron-nas",
        "num_attention_heads": H, "num_hidden_layers": len(blocks),
        "num_key_value_heads": None, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "torch_dtype": "float32", "transformers_version": "4.48.3", "use_cache": True,
        "vocab_size": vocab}
    shapes = {"model.embed_tokens.weight": [vocab, D], "model.norm.weight": [D],
              "lm_head.weight": [vocab, D]}
    for i, b in enumerate(blocks):
        L = "model.layers.%d." % i
        a, f = b["attention"], b["ffn"]
        if not a["no_op"]:
            shapes[L + "input_layernorm.weight"] = [D]
            if a["replace_with_linear"]:
                shapes[L + "self_attn.linear_attn.weight"] = [D, D]
            else:
                kv = H // a["n_heads_in_group"]
                shapes.update({L + "self_attn.q_proj.weight": [D, D],
                               L + "self_attn.k_proj.weight": [kv * hd, D],
                               L + "self_attn.v_proj.weight": [kv * hd, D],
                               L + "self_attn.o_proj.weight": [D, D]})
        if not f["no_op"]:
            shapes[L + "post_attention_layernorm.weight"] = [D]
            if f["replace_with_linear"]:
                shapes[L + "mlp.linear_mlp.weight"] = [D, D]
            else:
                inter = decilm_ffn_size(f["ffn_mult"], D)
                shapes.update({L + "mlp.gate_proj.weight": [inter, D],
                               L + "mlp.up_proj.weight": [inter, D],
                               L + "mlp.down_proj.weight": [D, inter]})
    tensors, stream = stream_fixture(shapes, 5151)
    add("decilm", config, tensors, lambda c, t: DeciLMPort(c, t), None, cases, stream=stream,
        port_on_twins=False,
        unchecked="a port of its own, which runs on no twin: its block kinds and their "
                  "sizes are checked against the modeling code by reading only",
        note="DeciLM / Nemotron-NAS (DeciLMForCausalLM, model_type nemotron-nas) at hidden 64, "
             "4 heads, 5 layers whose block_configs cover every kind of block: attention with "
             "2, 1 and 4 KV heads, attention replaced by a linear map, no attention; FFNs of "
             "ffn_mult 2.0, 1.0 and 7.0 (widths 256, 256, 512), an FFN replaced by a linear "
             "map, no FFN. Random weights scaled as the native fixtures', float32.")


def add_chatglm6b(add):
    """The first ChatGLM-6B: no native twin, random weights, prompts laid out with the
    tokenizer's special tokens ([gMASK] <sop> appended) and the variants the modeling
    file's position and mask rules distinguish."""
    V, D, H, I, layers = 256, 64, 4, 192, 2
    # The hub's layout of the special ids, at the end of a small vocabulary
    # (130000.. of 130528): [MASK] [gMASK] [sMASK] <unused_0> <sop> <eop>; <pad> is 3.
    MASK, GMASK, SOP, EOP = V - 32, V - 31, V - 28, V - 27
    shapes = {"transformer.word_embeddings.weight": [V, D],
              "transformer.final_layernorm.weight": [D], "transformer.final_layernorm.bias": [D]}
    for i in range(layers):
        L = "transformer.layers.%d." % i
        for norm in ("input_layernorm", "post_attention_layernorm"):
            shapes[L + norm + ".weight"] = [D]
            shapes[L + norm + ".bias"] = [D]
        for name, out, inp in (("attention.query_key_value", 3 * D, D), ("attention.dense", D, D),
                               ("mlp.dense_h_to_4h", I, D), ("mlp.dense_4h_to_h", D, I)):
            shapes[L + name + ".weight"] = [out, inp]
            shapes[L + name + ".bias"] = [out]
    t = random_like_fixture(shapes, 6006)
    # With tied embeddings and random weights the residual, the token's own scaled
    # normalised embedding, would decide every continuation (the model repeats its last
    # token); larger projections let attention and the MLP decide.
    for name in t:
        for suffix, gain in (("query_key_value.weight", 2), ("attention.dense.weight", 3),
                             ("dense_h_to_4h.weight", 2), ("dense_4h_to_h.weight", 3)):
            if name.endswith(suffix):
                t[name] = t[name] * gain
    t = cast(t, torch.float16)
    # As on the hub: lm_head.weight (equal to the word embeddings, which from_pretrained
    # ties to it) and each layer's rotary inv_freq buffer, which the modeling file ignores
    # when loading.
    t["lm_head.weight"] = t["transformer.word_embeddings.weight"].clone()
    dim = D // H // 2
    for i in range(layers):
        t["transformer.layers.%d.attention.rotary_emb.inv_freq" % i] = (
            1. / (10000 ** (torch.arange(0, dim, 2).float() / dim))).half()
    config = {
        "_name_or_path": "THUDM/chatglm-6b", "architectures": ["ChatGLMModel"],
        "auto_map": {"AutoConfig": "configuration_chatglm.ChatGLMConfig",
                     "AutoModel": "modeling_chatglm.ChatGLMForConditionalGeneration",
                     "AutoModelForSeq2SeqLM": "modeling_chatglm.ChatGLMForConditionalGeneration"},
        "bos_token_id": SOP, "eos_token_id": EOP, "mask_token_id": MASK, "gmask_token_id": GMASK,
        "pad_token_id": 3, "hidden_size": D, "inner_hidden_size": I, "layernorm_epsilon": 1e-05,
        "max_sequence_length": 2048, "model_type": "chatglm", "num_attention_heads": H,
        "num_layers": layers, "position_encoding_2d": True, "quantization_bit": 0,
        "pre_seq_len": None, "prefix_projection": False, "torch_dtype": "float16",
        "transformers_version": "4.27.1", "use_cache": True, "vocab_size": V}

    def text(gen, n):  # ordinary tokens: above <unk> <s> </s> <pad> <n>, below the specials
        return torch.randint(5, MASK, (n,), generator=gen).tolist()

    makers = [
        # The tokenizer's layout: text [gMASK] <sop>.
        lambda g: text(g, 6) + [GMASK, SOP],
        # The shortest prompt: a context of [gMASK] alone.
        lambda g: [GMASK, SOP],
        # [MASK] inside the context and no [gMASK]: the block positions anchor at [MASK].
        lambda g: text(g, 3) + [MASK] + text(g, 4) + [SOP],
        # Both: [gMASK] wins although [MASK] comes first.
        lambda g: text(g, 2) + [MASK] + text(g, 3) + [GMASK, SOP],
        # Tokens after <sop> in the prompt: block positions 1, 2, 3, 4 already there.
        lambda g: text(g, 5) + [GMASK, SOP] + text(g, 3),
        # A longer context, so that chunked prefill has a part to chunk after it.
        lambda g: text(g, 17) + [GMASK, SOP],
    ]
    add("chatglm6b", config, t, lambda c, tt: ChatGLM6BPort(c, tt), None, fmt="bin-sharded",
        prompt_makers=makers, port_on_twins=False,
        note="The first ChatGLM-6B (THUDM/chatglm-6b's config.json fields; ChatGLMModel with "
             "position_encoding_2d): 2 layers of hidden 64, 4 heads, inner 192, a vocabulary of "
             "256 with the special ids laid out as the hub's ([MASK] 224, [gMASK] 225, <sop> "
             "228, <eop> 229, <pad> 3); random weights scaled as the native fixtures' (the "
             "attention and MLP projections 2-3 times larger, so that the layers rather than "
             "the residual of the token's own embedding decide the continuations), float16 "
             "as the hub's, in two pytorch_model-0000N-of-00002.bin shards with their index; "
             "lm_head.weight equal to the word embeddings and the per-layer rotary inv_freq "
             "buffers, as the hub's checkpoint has them. Prompts: text [gMASK] <sop>; [gMASK] "
             "<sop> alone; [MASK] inside the context without [gMASK]; [MASK] and [gMASK] "
             "([gMASK] wins); tokens after <sop>; a 17-token context.")


MIN_MARGIN = 2e-3


def config_vocab(config):
    return config.get("padded_vocab_size") or config["vocab_size"]


def layer_count(config):
    return (config.get("num_hidden_layers") or config.get("num_layers") or
            config.get("num_transformer_layers"))


def sorted_json(obj):
    return json.dumps(obj, indent=2, sort_keys=False) + "\n"


def build(fixture, natives):
    """Returns {file name: bytes} for one fixture folder."""
    config, port, layers = fixture["config"], fixture["port"], layer_count(fixture["config"])
    # The port reads the tensors as written (dtype included).
    tensors = {k: v.clone() for k, v in fixture["tensors"].items()}
    files = {"config.json": sorted_json(config).encode()}
    if fixture.get("format", "safetensors") == "safetensors":
        # Generated at test time from a manifest (scripts/fixture_weights.py).
        manifest = weights_manifest(fixture, tensors)
        files["weights.json"] = fixture_weights.dump_manifest(manifest).encode()
        reread = read_weight_files(fixture_weights.materialise(manifest))
        for k, v in tensors.items():
            if not torch.equal(reread[k], v) or reread[k].dtype != v.dtype:
                sys.exit("%s: the manifest does not rebuild %s" % (fixture["name"], k))
    else:
        files.update(weight_files(tensors, fixture["format"]))
        reread = read_weight_files(files)

    def make_port():
        return port(config, reread)

    if fixture["source"]:
        check_twin("%s (twin of %s)" % (fixture["name"], fixture["source"]), make_port, layers,
                   natives[fixture["source"]])
        folder = os.path.join(FIXTURES, fixture["source"])
        # The native fixture's cases and logits (its reference.safetensors, which the
        # manifest names); the tensor list is this folder's own.
        with open(os.path.join(folder, "reference.json")) as f:
            reference = json.load(f)
        reference["checkpoint_tensors"] = {k: list(v.shape) for k, v in sorted(tensors.items())}
        reference.pop("weight_names_seen_by_transformers", None)
        files["reference.json"] = sorted_json(reference).encode()
        return files

    cases, logits = [], {}
    makers = fixture.get("prompt_makers")
    if makers:
        prompts = [None for _ in makers]
    elif fixture.get("prompt_lengths"):
        prompts = [[] for _ in fixture["prompt_lengths"]]
    else:
        prompts = [c["input_ids"] for c in fixture["cases"]]
    gen = torch.Generator().manual_seed(4242)
    for i, prompt in enumerate(prompts):
        # The native fixture's prompt when its greedy path is well separated; otherwise
        # (or when none is given) seeded random prompts of the same length until every
        # greedy step has a top-1 / top-2 margin of at least MIN_MARGIN, so that float32
        # arithmetic cannot flip a token.
        length = 0 if makers else len(prompt) or fixture["prompt_lengths"][i]
        for attempt in range(200):
            if makers:
                prompt = makers[i](gen)  # the same layout, other text tokens
            elif not prompt or attempt > 0:
                prompt = torch.randint(3, config_vocab(config), (length,), generator=gen).tolist()
            prompt_logits, greedy, margin = run_case(make_port, layers, prompt)
            if margin >= MIN_MARGIN:
                break
        else:
            sys.exit("%s: no prompt %d with a greedy margin of %g" %
                     (fixture["name"], i, MIN_MARGIN))
        cases.append({"input_ids": prompt, "greedy_new_ids": greedy, "min_greedy_margin": margin})
        logits["case%d.logits" % i] = prompt_logits.to(torch.float32)
    reference = {
        "arch": config["architectures"][0], "model_type": config["model_type"],
        "format": fixture.get("format", "safetensors"),
        "reference": "float64 forward written from the published modeling code "
                     "(scripts/make_remote_code_fixtures.py), greedy decoding through a "
                     "key/value cache as the modeling code's generate() runs it",
        "logits": "reference.safetensors holds caseN.logits [len(input_ids), vocab_size] float32",
        "cases": cases,
        "checkpoint_tensors": {k: list(v.shape) for k, v in sorted(tensors.items())},
    }
    files["reference.json"] = sorted_json(reference).encode()
    files["reference.safetensors"] = safetensors_bytes(logits)
    print("  %-44s reference computed (smallest greedy margin %.4f)" %
          (fixture["name"], min(c["min_greedy_margin"] for c in cases)))
    return files


def weights_manifest(fixture, tensors):
    """The weights.json of a generated fixture: its own stream, or gathers of the rows of
    a native fixture's stream tensors (the first native that holds them all)."""
    meta = {"format": "pt"}
    if fixture["stream"]:
        spec = {k: (_ST_NAMES[v.dtype], list(v.shape)) for k, v in tensors.items()}
        return fixture_weights.finish_manifest(
            fixture_weights.stream_manifest(fixture["stream"], spec, meta))
    raw = {}
    for k, v in tensors.items():
        v = v.contiguous()
        bits = v.view(torch.int16) if v.element_size() == 2 else v.view(torch.int32)
        raw[k] = (_ST_NAMES[v.dtype], list(v.shape), bits.numpy().tobytes())
    for native in ["llama", "glm", "qwen2"]:
        try:
            m = fixture_weights.twin_manifest(fixture_weights.load_manifest(native), raw, meta,
                                              fixture["source"])
        except ValueError:
            continue
        return fixture_weights.finish_manifest(m)
    sys.exit("%s: its tensors are not gathers of a native fixture's" % fixture["name"])


_ST_NAMES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def torch_bin_bytes(tensors):
    import io
    buf = io.BytesIO()
    torch.save({k: tensors[k] for k in sorted(tensors)}, buf)
    return buf.getvalue()


def weight_files(tensors, fmt):
    """The weights as the hub ships them: model.safetensors, pytorch_model.bin (a zip
    torch pickle), or pytorch_model-0000N-of-00002.bin shards with their index."""
    if fmt == "safetensors":
        return {"model.safetensors": safetensors_bytes(tensors)}
    if fmt == "bin":
        return {"pytorch_model.bin": torch_bin_bytes(tensors)}
    assert fmt == "bin-sharded"
    names = sorted(tensors)
    half = len(names) // 2
    shards = [names[:half], names[half:]]
    files, weight_map, total = {}, {}, 0
    for i, part in enumerate(shards):
        fname = "pytorch_model-%05d-of-%05d.bin" % (i + 1, len(shards))
        files[fname] = torch_bin_bytes({k: tensors[k] for k in part})
        for k in part:
            weight_map[k] = fname
            total += tensors[k].numel() * tensors[k].element_size()
    files["pytorch_model.bin.index.json"] = sorted_json(
        {"metadata": {"total_size": total}, "weight_map": weight_map}).encode()
    return files


def read_weight_files(files):
    import io
    out = {}
    for name, data in files.items():
        if name.endswith(".safetensors"):
            out.update(read_safetensors_bytes(data))
        elif name.endswith(".bin"):
            out.update(torch.load(io.BytesIO(data)))
    return out


def read_safetensors_bytes(data):
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as f:
        f.write(data)
        f.flush()
        return read_safetensors(f.name)


def readme(fixture):
    lines = ["# %s" % fixture["name"], "", fixture["note"], ""]
    if fixture["source"]:
        lines += ["A twin of the native `%s` fixture: an exact renaming / merging of its tensors, "
                  "so `reference.json` and `reference.safetensors` are that fixture's "
                  "(transformers 5.17, float64). `scripts/make_remote_code_fixtures.py` checks, "
                  "before writing it, that a float64 port of the published modeling code run on "
                  "these files reproduces those logits and greedy tokens." % fixture["source"]]
    else:
        prompts = ("laid out as above, their text tokens seeded random ones redrawn until every "
                   "greedy step of the reference has a top-1 / top-2 logit margin of at least %g"
                   if fixture.get("prompt_makers") else
                   "the native fixture's where every greedy step of the reference has a "
                   "top-1 / top-2 logit margin of at least %g, seeded random ones of the same "
                   "length otherwise")
        checked = ("the same port reproduces the native fixtures' Hugging Face logits on the "
                   "twins" if fixture["port_on_twins"] else
                   fixture.get("unchecked", "a port of its own, which runs on no twin: its 2-D "
                               "positions, bidirectional context and scaled residual are "
                               "checked against the modeling code by reading only"))
        lines += ["No natively supported architecture computes this, so the reference is a "
                  "float64 forward written from the published modeling code's definitions "
                  "(`scripts/make_remote_code_fixtures.py`; " + checked + "), with greedy "
                  "decoding through a key/value cache as the modeling code's `generate()` does. "
                  "Prompts: " + prompts % MIN_MARGIN + "."]
    return ("\n".join(lines) + "\n").encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="compare with the fixtures in the repository instead of writing")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="build only this fixture (repeatable)")
    args = ap.parse_args()
    fixtures, natives = fixture_list()
    stale = []
    for fx in fixtures:
        if args.only and fx["name"] not in args.only:
            continue
        files = build(fx, natives)
        files["README.md"] = readme(fx)
        folder = os.path.join(FIXTURES, fx["name"])
        if args.check:
            for name, data in files.items():
                path = os.path.join(folder, name)
                if not os.path.exists(path) or open(path, "rb").read() != data:
                    stale.append(path)
            continue
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.makedirs(folder)
        for name, data in files.items():
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
    if stale:
        sys.exit("stale fixture files:\n  " + "\n  ".join(stale))
    print("ok" if args.check else "written under %s" % FIXTURES)


if __name__ == "__main__":
    main()
