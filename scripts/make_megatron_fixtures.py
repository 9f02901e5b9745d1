#!/usr/bin/env python3
"""Creates the Megatron-LM checkpoint fixtures under tests/model/fixtures/megatron/.

    python3 scripts/make_megatron_fixtures.py OUT.tar

Needs torch, numpy and transformers. Two tiny Hugging Face models are drawn from a fixed
seed: a GPT-2-like one (LayerNorm, GELU, learned positions, biases, tied embeddings) and a
Llama-like one (RMSNorm, SwiGLU, rotary, grouped-query attention, untied output layer).
Their weights are rounded to bfloat16 first, so that the Megatron shards (stored in
bfloat16, as a --bf16 run saves them) hold exactly the weights the reference ran with.

Each model is written the way Megatron-LM saves a run of tensor-parallel size 2 and
pipeline-parallel size 2 (mp_rank_TT_PPP/model_optim_rng.pt, torch.save with its
default protocol 2), once with the legacy names (nested dicts under
model.language_model) and once with the Megatron-core names (a flat state dict with
TransformerEngine's fused norm weights and _extra_state entries):

  * column-parallel weights (query_key_value / linear_qkv, dense_h_to_4h / linear_fc1,
    the word embeddings, the output layer) split along dim 0, row-parallel ones
    (dense / linear_proj, dense_4h_to_h / linear_fc2) along dim 1;
  * the fused qkv interleaved per query group ([group][q x heads per group, k, v][head
    dim], checkpoint_version 3.0), the SwiGLU fc1 of each shard its own [gate; up];
  * the vocabulary padded from 120 to 128 rows (make_vocab_size_divisible_by 64 times
    the tensor-parallel size), the padded rows drawn like the others;
  * pipeline stage 1 numbering its layers from 0, the first stage holding the
    embeddings, the last the final norm and the output layer (a tied model's last stage
    a copy of the word embeddings: word_embeddings_for_head / output_layer);
  * each file {"args": argparse.Namespace, "checkpoint_version": 3.0, "iteration": N,
    "model": ..., "rng_state": [python, numpy (ndarray), torch and CUDA RNG states]}, the
    namespace holding torch dtypes and Megatron enums (pickled by reference to
    megatron.core.enums, a module that need not exist where the file is read).

Layouts: gpt_legacy and llama_legacy are run folders (latest_checkpointed_iteration.txt
naming iter_0000100/), gpt_core names "release" (release/), llama_core is an iteration
folder itself. References (<model>.reference.json): the prompt, the HF model's float32
logits at every prompt position and 8 greedy tokens (full recomputation).

hostile/: single shards for the refusal tests (os.system as a reduce in the args and as
the model, a namespace without hidden_size, a shard with a mis-shaped fc1).

tokenizer/: a word-level tokenizer of the 120 tokens "t0".."t119" (the checkpoints carry
none), for the command-line tests. `--tokenizer-only DIR` writes just it (no torch).
"""

import json
import os
import sys


def tokenizer_files():
    vocab = {f"t{i}": i for i in range(120)}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
           "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"},
           "post_processor": None, "decoder": None,
           "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"}}
    return {"tokenizer.json": json.dumps(tok).encode(),
            "tokenizer_config.json": json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}).encode()}


if __name__ == "__main__" and sys.argv[1:2] == ["--tokenizer-only"]:
    os.makedirs(sys.argv[2], exist_ok=True)
    for name, data in tokenizer_files().items():
        with open(os.path.join(sys.argv[2], name), "wb") as f:
            f.write(data)
    sys.exit(0)

import argparse  # noqa: E402
import enum  # noqa: E402
import io  # noqa: E402
import random  # noqa: E402
import tarfile  # noqa: E402
import types  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

TP, PP = 2, 2
VOCAB, PADDED = 120, 128
PROMPT = [5, 17, 42, 99, 3, 64, 11, 80]
GREEDY = 8


def fake_module(name):
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        n = ".".join(parts[:i])
        if n not in sys.modules:
            sys.modules[n] = types.ModuleType(n)
    return sys.modules[name]


enums = fake_module("megatron.core.enums")


class ModelType(enum.Enum):
    encoder_or_decoder = 1
    encoder_and_decoder = 2


ModelType.__module__ = "megatron.core.enums"
ModelType.__qualname__ = "ModelType"
enums.ModelType = ModelType


class Evil:
    """Pickles as a call of os.system: a reader that ran it would print PWNED."""

    def __reduce__(self):
        return (os.system, ("echo PWNED",))


def draw(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("ln" in name or "norm" in name) and name.endswith("weight"):
                v = 1 + 0.2 * torch.randn(p.shape, generator=g)
            elif p.dim() == 1:
                v = 0.1 * torch.randn(p.shape, generator=g)
            else:
                v = 0.25 * torch.randn(p.shape, generator=g)
            p.copy_(v.to(torch.bfloat16).float())


def reference(model):
    model.eval()
    with torch.no_grad():
        ids = torch.tensor([PROMPT])
        logits = model(ids).logits[0].float()
        seq = list(PROMPT)
        margins = []
        for _ in range(GREEDY):
            last = model(torch.tensor([seq])).logits[0, -1].float()
            top = torch.topk(last, 2).values
            margins.append(float(top[0] - top[1]))
            seq.append(int(last.argmax()))
    print("min greedy margin", min(margins))
    return {"prompt": PROMPT, "vocab_size": VOCAB, "logits": logits.tolist(),
            "greedy_new_ids": seq[len(PROMPT):]}


def pad_vocab(w, seed):
    g = torch.Generator().manual_seed(seed)
    extra = (0.25 * torch.randn((PADDED - w.shape[0],) + tuple(w.shape[1:]), generator=g))
    return torch.cat([w, extra.to(torch.bfloat16).float()], 0)


def interleave_qkv(q, k, v, heads, groups, hd):
    """[group][q x heads/groups, k, v][hd] rows (weights [rows, D] or biases [rows])."""
    rest = q.shape[1:]
    qpg = heads // groups
    q = q.reshape(groups, qpg * hd, *rest)
    k = k.reshape(groups, hd, *rest)
    v = v.reshape(groups, hd, *rest)
    return torch.cat([q, k, v], 1).reshape(groups * (qpg + 2) * hd, *rest)


def split(t, dim, r):
    return torch.chunk(t, TP, dim)[r].clone()


def gpt_layers(m, cfg):
    """Per layer: Megatron-semantic tensors (full, unsharded) and how each shards."""
    D, H = cfg.n_embd, cfg.n_head
    hd = D // H
    out = []
    for blk in m.transformer.h:
        W = blk.attn.c_attn.weight.T  # [3D, D] rows q; k; v
        b = blk.attn.c_attn.bias
        q, k, v = W.split(D, 0)
        bq, bk, bv = b.split(D, 0)
        out.append({
            "norm1.weight": (blk.ln_1.weight, None), "norm1.bias": (blk.ln_1.bias, None),
            "qkv.weight": (interleave_qkv(q, k, v, H, H, hd), 0),
            "qkv.bias": (interleave_qkv(bq, bk, bv, H, H, hd), 0),
            "proj.weight": (blk.attn.c_proj.weight.T, 1), "proj.bias": (blk.attn.c_proj.bias, None),
            "norm2.weight": (blk.ln_2.weight, None), "norm2.bias": (blk.ln_2.bias, None),
            "fc1.weight": (blk.mlp.c_fc.weight.T, 0), "fc1.bias": (blk.mlp.c_fc.bias, 0),
            "fc2.weight": (blk.mlp.c_proj.weight.T, 1), "fc2.bias": (blk.mlp.c_proj.bias, None),
        })
    glob = {"word": pad_vocab(m.transformer.wte.weight, 1), "pos": m.transformer.wpe.weight,
            "final.weight": m.transformer.ln_f.weight, "final.bias": m.transformer.ln_f.bias,
            "output": None}
    return out, glob


def llama_layers(m, cfg):
    H, G = cfg.num_attention_heads, cfg.num_key_value_heads
    hd = cfg.hidden_size // H
    out = []
    for blk in m.model.layers:
        a, f = blk.self_attn, blk.mlp
        out.append({
            "norm1.weight": (blk.input_layernorm.weight, None),
            "qkv.weight": (interleave_qkv(a.q_proj.weight, a.k_proj.weight, a.v_proj.weight,
                                          H, G, hd), 0),
            "proj.weight": (a.o_proj.weight, 1),
            "norm2.weight": (blk.post_attention_layernorm.weight, None),
            # Each shard's fc1 is its own [gate; up].
            "fc1.weight": ([f.gate_proj.weight, f.up_proj.weight], "swiglu"),
            "fc2.weight": (f.down_proj.weight, 1),
        })
    glob = {"word": pad_vocab(m.model.embed_tokens.weight, 2), "pos": None,
            "final.weight": m.model.norm.weight, "final.bias": None,
            "output": pad_vocab(m.lm_head.weight, 3)}
    return out, glob


def shard_of(spec, r):
    t, how = spec
    if how is None:
        return t.clone()
    if how == "swiglu":
        return torch.cat([split(t[0], 0, r), split(t[1], 0, r)], 0)
    return split(t, how, r)


LEGACY = {"norm1": "input_layernorm", "qkv": "self_attention.query_key_value",
          "proj": "self_attention.dense", "norm2": "post_attention_layernorm",
          "fc1": "mlp.dense_h_to_4h", "fc2": "mlp.dense_4h_to_h"}
CORE = {"norm1.weight": "self_attention.linear_qkv.layer_norm_weight",
        "norm1.bias": "self_attention.linear_qkv.layer_norm_bias",
        "qkv": "self_attention.linear_qkv", "proj": "self_attention.linear_proj",
        "norm2.weight": "mlp.linear_fc1.layer_norm_weight",
        "norm2.bias": "mlp.linear_fc1.layer_norm_bias",
        "fc1": "mlp.linear_fc1", "fc2": "mlp.linear_fc2"}


def core_name(key):
    if key in CORE:
        return CORE[key]
    base, leaf = key.rsplit(".", 1)
    return CORE[base] + "." + leaf


def shard_state(layers, glob, scheme, tied, r, p):
    per_stage = len(layers) // PP
    bf = lambda t: t.detach().to(torch.bfloat16).contiguous()
    first, last = p == 0, p == PP - 1
    if scheme == "legacy":
        enc = {}
        for i in range(per_stage):
            for key, spec in layers[p * per_stage + i].items():
                base, leaf = key.rsplit(".", 1)
                enc[f"layers.{i}.{LEGACY[base]}.{leaf}"] = bf(shard_of(spec, r))
        lm = {}
        if first:
            lm["embedding"] = {"word_embeddings": {"weight": bf(split(glob["word"], 0, r))}}
            if glob["pos"] is not None:
                lm["embedding"]["position_embeddings"] = {"weight": bf(glob["pos"])}
        if last:
            enc["final_layernorm.weight"] = bf(glob["final.weight"])
            if glob["final.bias"] is not None:
                enc["final_layernorm.bias"] = bf(glob["final.bias"])
        lm["encoder"] = enc
        model = {"language_model": lm}
        if last and not tied:
            lm["output_layer"] = {"weight": bf(split(glob["output"], 0, r))}
        if last and tied and PP > 1:
            model["word_embeddings_for_head"] = {"weight": bf(split(glob["word"], 0, r))}
        return model
    sd = {}
    if first:
        sd["embedding.word_embeddings.weight"] = bf(split(glob["word"], 0, r))
        if glob["pos"] is not None:
            sd["embedding.position_embeddings.weight"] = bf(glob["pos"])
    for i in range(per_stage):
        pre = f"decoder.layers.{i}."
        for key, spec in layers[p * per_stage + i].items():
            sd[pre + core_name(key)] = bf(shard_of(spec, r))
        sd[pre + "self_attention.core_attention._extra_state"] = None
        sd[pre + "self_attention.linear_qkv._extra_state"] = io.BytesIO(b"\x00te-fp8-meta")
    if last:
        sd["decoder.final_layernorm.weight"] = bf(glob["final.weight"])
        if glob["final.bias"] is not None:
            sd["decoder.final_layernorm.bias"] = bf(glob["final.bias"])
        # A tied model's last stage holds a copy of the embedding as its output layer.
        out = glob["word"] if tied else glob["output"]
        sd["output_layer.weight"] = bf(split(out, 0, r))
    return sd


def rng_state():
    cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() else torch.zeros(16, dtype=torch.uint8)
    return [{"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
             "torch_rng_state": torch.get_rng_state(), "cuda_rng_state": cuda,
             "rng_tracker_states": {"model-parallel-rng": cuda.clone()}}]


def gpt_args(cfg, scheme):
    a = argparse.Namespace(
        num_layers=cfg.n_layer, hidden_size=cfg.n_embd, ffn_hidden_size=cfg.n_inner,
        num_attention_heads=cfg.n_head, group_query_attention=False, num_query_groups=1,
        kv_channels=cfg.n_embd // cfg.n_head, max_position_embeddings=cfg.n_positions,
        seq_length=cfg.n_positions, padded_vocab_size=PADDED, vocab_size=None,
        make_vocab_size_divisible_by=64, normalization="LayerNorm", swiglu=False,
        openai_gelu=False, squared_relu=False, position_embedding_type="learned_absolute",
        rotary_base=10000, rotary_percent=1.0, add_bias_linear=True, add_qkv_bias=False,
        untie_embeddings_and_output_weights=False,
        apply_residual_connection_post_layernorm=False, tensor_model_parallel_size=TP,
        pipeline_model_parallel_size=PP, bf16=True, fp16=False, params_dtype=torch.bfloat16,
        tokenizer_type="GPT2BPETokenizer", model_type=ModelType.encoder_or_decoder,
        data_path=["/data/corpus_text_document"], lr=3e-4, seed=1234)
    if scheme == "legacy":
        a.layernorm_epsilon = cfg.layer_norm_epsilon
    else:
        a.norm_epsilon = cfg.layer_norm_epsilon
        a.use_mcore_models = True
    return a


def llama_args(cfg, scheme):
    rope = getattr(cfg, "rope_theta", None)
    if rope is None:
        rope = cfg.rope_parameters["rope_theta"]
    a = argparse.Namespace(
        num_layers=cfg.num_hidden_layers, hidden_size=cfg.hidden_size,
        ffn_hidden_size=cfg.intermediate_size, num_attention_heads=cfg.num_attention_heads,
        group_query_attention=True, num_query_groups=cfg.num_key_value_heads,
        kv_channels=cfg.hidden_size // cfg.num_attention_heads,
        max_position_embeddings=cfg.max_position_embeddings, seq_length=32,
        padded_vocab_size=PADDED, vocab_size=None, make_vocab_size_divisible_by=64,
        normalization="RMSNorm", swiglu=True, openai_gelu=False, squared_relu=False,
        position_embedding_type="rope", rotary_base=int(rope), rotary_percent=1.0,
        add_bias_linear=False, add_qkv_bias=False, untie_embeddings_and_output_weights=True,
        apply_residual_connection_post_layernorm=False, tensor_model_parallel_size=TP,
        pipeline_model_parallel_size=PP, bf16=True, fp16=False, params_dtype=torch.bfloat16,
        tokenizer_type="Llama2Tokenizer", model_type=ModelType.encoder_or_decoder, seed=1234)
    if scheme == "legacy":
        a.norm_epsilon = cfg.rms_norm_eps  # newer legacy runs spell it like core
    else:
        a.norm_epsilon = cfg.rms_norm_eps
        a.use_mcore_models = True
    return a


def save(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    gcfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2,
                                   n_head=4, n_inner=64, activation_function="gelu",
                                   resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    gpt = transformers.GPT2LMHeadModel(gcfg).float()
    draw(gpt, 11)
    lcfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                    num_hidden_layers=4, num_attention_heads=4,
                                    num_key_value_heads=2, max_position_embeddings=64,
                                    rms_norm_eps=1e-5, tie_word_embeddings=False)
    llama = transformers.LlamaForCausalLM(lcfg).float()
    draw(llama, 12)
    for m in (gpt, llama):
        m.config._attn_implementation = "eager"
    root = "megatron/"
    with tarfile.open(out, "w") as tar:
        for name, data in tokenizer_files().items():
            add(tar, root + "tokenizer/" + name, data)
        for name, model, cfg, layers_of, args_of, tied in (
                ("gpt", gpt, gcfg, gpt_layers, gpt_args, True),
                ("llama", llama, lcfg, llama_layers, llama_args, False)):
            add(tar, root + name + ".reference.json", json.dumps(reference(model)).encode())
            with torch.no_grad():
                layers, glob = layers_of(model, cfg)
            for scheme in ("legacy", "core"):
                folder = f"{root}{name}_{scheme}/"
                if scheme == "legacy":
                    add(tar, folder + "latest_checkpointed_iteration.txt", b"100")
                    it, sub = 100, "iter_0000100/"
                elif name == "gpt":
                    add(tar, folder + "latest_checkpointed_iteration.txt", b"release")
                    it, sub = 0, "release/"
                else:
                    it, sub = 300, ""
                for p in range(PP):
                    for r in range(TP):
                        with torch.no_grad():
                            state = shard_state(layers, glob, scheme, tied, r, p)
                        ck = {"args": args_of(cfg, scheme), "checkpoint_version": 3.0,
                              "iteration": it, "model": state, "rng_state": rng_state(),
                              "num_floating_point_operations_so_far": 0}
                        add(tar, f"{folder}{sub}mp_rank_{r:02d}_{p:03d}/model_optim_rng.pt",
                            save(ck))
        # Refusals.
        with torch.no_grad():
            layers, glob = gpt_layers(gpt, gcfg)
        a = gpt_args(gcfg, "core")
        a.num_layers = Evil()
        add(tar, root + "hostile/reduce_in_args.pt",
            save({"args": a, "checkpoint_version": 3.0, "iteration": 1, "model": {}}))
        add(tar, root + "hostile/reduce_as_model.pt",
            save({"args": gpt_args(gcfg, "core"), "checkpoint_version": 3.0, "iteration": 1,
                  "model": Evil()}))
        a = gpt_args(gcfg, "core")
        del a.hidden_size
        add(tar, root + "hostile/no_hidden_size.pt",
            save({"args": a, "checkpoint_version": 3.0, "iteration": 1, "model": {}}))
        with torch.no_grad():
            sd = shard_state(layers, glob, "core", True, 1, 1)
        w = sd["decoder.layers.0.mlp.linear_fc1.weight"]
        sd["decoder.layers.0.mlp.linear_fc1.weight"] = w[:-1].clone()
        add(tar, root + "hostile/bad_fc1_mp_rank_01_001.pt",
            save({"args": gpt_args(gcfg, "core"), "checkpoint_version": 3.0, "iteration": 0,
                  "model": sd}))


if __name__ == "__main__":
    main()
