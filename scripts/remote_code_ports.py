"""Float64 ports of the published modeling code of the remote-code families (Llama /
Aquila, Baichuan 7B and 13B with NormHead, the first ChatGLM-6B, ChatGLM2/3 and GLM-4,
Qwen-1 with dynamic NTK and log-n attention, InternLM, InternLM2, OpenELM, DeciLM /
Nemotron-NAS), with a
key/value cache so that greedy decoding follows the modeling files' generate(), plus the safetensors reading and writing that
make_remote_code_fixtures.py needs. Each port takes (config.json as a dict, the
checkpoint's tensors by name) and exposes step(ids, cache) -> logits [len(ids), vocab].
"""

import json
import math
import os
import struct
import sys

import torch

sys.dont_write_bytecode = True  # keep scripts/ free of __pycache__
import fixture_weights  # noqa: E402

F64 = torch.float64

# ----------------------------------------------------------------------------------------
# safetensors
# ----------------------------------------------------------------------------------------
_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "F64": torch.float64, "I64": torch.int64, "I32": torch.int32}
_NAMES = {v: k for k, v in _DTYPES.items()}


def read_safetensors(path, data=None):
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        buf = bytearray(data[8 + n + b:8 + n + e])
        t = torch.frombuffer(buf, dtype=dtype) if buf else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def safetensors_bytes(tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def read_safetensors_bytes(data):
    return read_safetensors(None, data)


def read_checkpoint(folder):
    """A fixture's tensors: built from its weights.json manifest (fixture_weights.py), or
    read from its safetensors files where it stores them."""
    if os.path.exists(os.path.join(folder, fixture_weights.MANIFEST)):
        with open(os.path.join(folder, fixture_weights.MANIFEST)) as f:
            files = fixture_weights.materialise(json.load(f))
        out = {}
        for name, data in sorted(files.items()):
            if name.endswith(".safetensors"):
                out.update(read_safetensors_bytes(data))
        return out
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        out.update(read_safetensors(os.path.join(folder, name)))
    return out


def load_native(folder):
    """A native fixture folder: its config, tensors and reference cases."""
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(folder, "reference.json")) as f:
        reference = json.load(f)
    logits = read_safetensors(os.path.join(folder, "reference.safetensors"))
    cases = [{"input_ids": c["input_ids"], "greedy_new_ids": c["greedy_new_ids"],
              "logits": logits["case%d.logits" % i].to(F64)}
             for i, c in enumerate(reference["cases"])]
    return config, read_checkpoint(folder), cases


# ----------------------------------------------------------------------------------------
# Shared float64 pieces (each family port below composes them as its modeling file does)
# ----------------------------------------------------------------------------------------
def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.to(F64)


def layer_norm(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w.to(F64), b.to(F64), eps)


def linear(x, w, b=None):
    y = x @ w.to(F64).t()
    return y if b is None else y + b.to(F64)


def silu(x):
    return x * torch.sigmoid(x)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_half(x, positions, inv_freq):
    """Llama / Qwen / InternLM style on the leading len(inv_freq) * 2 dims. x [T, H, d]."""
    rot = inv_freq.numel() * 2
    ang = positions.to(F64)[:, None] * inv_freq[None, :]
    emb = torch.cat((ang, ang), dim=-1)[:, None, :]
    xr, xp = x[..., :rot], x[..., rot:]
    return torch.cat((xr * emb.cos() + rotate_half(xr) * emb.sin(), xp), dim=-1)


def inv_freq(base, dim):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=F64) / dim))


class Cache:
    def __init__(self, layers):
        self.k = [None] * layers
        self.v = [None] * layers
        self.length = 0

    def append(self, layer, k, v):
        self.k[layer] = k if self.k[layer] is None else torch.cat((self.k[layer], k), 0)
        self.v[layer] = v if self.v[layer] is None else torch.cat((self.v[layer], v), 0)
        return self.k[layer], self.v[layer]


def attention(q, k, v, q_start, scale, bias=None):
    """Causal attention of queries at positions q_start.. over keys 0..len(k)-1.
    q [T, H, d]; k, v [L, KV, d]; bias [H, T, L] added after the scale."""
    heads, kv_heads = q.shape[1], k.shape[1]
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.einsum("thd,lhd->htl", q, k) * scale
    if bias is not None:
        scores = scores + bias
    qpos = torch.arange(q.shape[0])[:, None] + q_start
    kpos = torch.arange(k.shape[0])[None, :]
    scores = scores.masked_fill((kpos > qpos)[None], float("-inf"))
    return torch.einsum("htl,lhd->thd", torch.softmax(scores, dim=-1), v)


# ----------------------------------------------------------------------------------------
# Family ports. Each takes (config, tensors) as published and exposes step(ids, cache).
# ----------------------------------------------------------------------------------------
class LlamaPort:
    """transformers' LlamaForCausalLM (also AquilaModel / AquilaForCausalLM, whose
    modeling files are copies of it)."""

    def __init__(self, config, t):
        self.c, self.t = config, t
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config.get("num_key_value_heads", self.heads)
        self.hd = config["hidden_size"] // self.heads
        self.eps = config["rms_norm_eps"]
        self.freq = inv_freq(config.get("rope_theta", 10000.0), self.hd)

    def step(self, ids, cache):
        t, p0 = self.t, cache.length
        pos = torch.arange(len(ids)) + p0
        x = t["model.embed_tokens.weight"].to(F64)[torch.tensor(ids)]
        for i in range(self.layers):
            L = "model.layers.%d." % i
            h = rms_norm(x, t[L + "input_layernorm.weight"], self.eps)
            q = linear(h, t[L + "self_attn.q_proj.weight"]).view(len(ids), self.heads, self.hd)
            k = linear(h, t[L + "self_attn.k_proj.weight"]).view(len(ids), self.kv_heads, self.hd)
            v = linear(h, t[L + "self_attn.v_proj.weight"]).view(len(ids), self.kv_heads, self.hd)
            q, k = rope_half(q, pos, self.freq), rope_half(k, pos, self.freq)
            k, v = cache.append(i, k, v)
            a = attention(q, k, v, p0, self.hd ** -0.5).reshape(len(ids), -1)
            x = x + linear(a, t[L + "self_attn.o_proj.weight"])
            h = rms_norm(x, t[L + "post_attention_layernorm.weight"], self.eps)
            g = silu(linear(h, t[L + "mlp.gate_proj.weight"])) * linear(h, t[L + "mlp.up_proj.weight"])
            x = x + linear(g, t[L + "mlp.down_proj.weight"])
        cache.length += len(ids)
        return linear(rms_norm(x, t["model.norm.weight"], self.eps), t["lm_head.weight"])


def baichuan_alibi_slopes(n):
    """_get_interleave of the 13B modeling files."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + baichuan_alibi_slopes(2 * closest)[0::2][:n - closest]


class BaichuanPort:
    """modeling_baichuan.py: the 7B files (rotary) or the 13B files (ALiBi, mask from
    _gen_alibi_mask), with Baichuan2's NormHead when norm_head is set."""

    def __init__(self, config, t, alibi, norm_head):
        self.c, self.t, self.alibi, self.norm_head = config, t, alibi, norm_head
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.hidden = config["hidden_size"]
        self.hd = self.hidden // self.heads
        self.eps = config["rms_norm_eps"]
        self.freq = inv_freq(10000.0, self.hd)
        if alibi:
            slopes = torch.tensor(baichuan_alibi_slopes(self.heads), dtype=F64)
            max_pos = config["model_max_length"]
            # _gen_alibi_mask: slope * (j - (max_pos - 1) - diag) = slope * j, per key j.
            point = torch.arange(max_pos, dtype=F64) - max_pos + 1
            point = point - point[0]
            self.alibi_bias = slopes[:, None] * point[None, :]

    def step(self, ids, cache):
        t, p0, n = self.t, cache.length, len(ids)
        pos = torch.arange(n) + p0
        x = t["model.embed_tokens.weight"].to(F64)[torch.tensor(ids)]
        for i in range(self.layers):
            L = "model.layers.%d." % i
            h = rms_norm(x, t[L + "input_layernorm.weight"], self.eps)
            proj = linear(h, t[L + "self_attn.W_pack.weight"]).unflatten(-1, (3, self.hidden))
            q = proj[:, 0].reshape(n, self.heads, self.hd)
            k = proj[:, 1].reshape(n, self.heads, self.hd)
            v = proj[:, 2].reshape(n, self.heads, self.hd)
            bias = None
            if self.alibi:
                bias = self.alibi_bias[:, None, :p0 + n].expand(self.heads, n, p0 + n)
            else:
                q, k = rope_half(q, pos, self.freq), rope_half(k, pos, self.freq)
            k, v = cache.append(i, k, v)
            a = attention(q, k, v, p0, self.hd ** -0.5, bias).reshape(n, -1)
            x = x + linear(a, t[L + "self_attn.o_proj.weight"])
            h = rms_norm(x, t[L + "post_attention_layernorm.weight"], self.eps)
            g = silu(linear(h, t[L + "mlp.gate_proj.weight"])) * linear(h, t[L + "mlp.up_proj.weight"])
            x = x + linear(g, t[L + "mlp.down_proj.weight"])
        cache.length += n
        head = t["lm_head.weight"].to(F64)
        if self.norm_head:
            head = torch.nn.functional.normalize(head)
        return linear(rms_norm(x, t["model.norm.weight"], self.eps), head)


class ChatGLMPort:
    """modeling_chatglm.py of ChatGLM2 / ChatGLM3 / GLM-4 (ChatGLMModel)."""

    def __init__(self, config, t):
        self.c, self.t = config, t
        self.layers = config["num_layers"]
        self.heads = config["num_attention_heads"]
        self.hd = config.get("kv_channels") or config["hidden_size"] // self.heads
        self.mq = config.get("multi_query_attention", False)
        self.groups = config["multi_query_group_num"] if self.mq else self.heads
        self.eps = config["layernorm_epsilon"]
        self.rms = config.get("rmsnorm", True)
        # RotaryEmbedding(rotary_dim // 2).forward_impl with base * rope_ratio.
        n_elem = self.hd // 2
        base = 10000 * config.get("rope_ratio", 1)
        self.theta = 1.0 / (base ** (torch.arange(0, n_elem, 2, dtype=F64) / n_elem))

    def norm(self, x, prefix):
        if self.rms:
            return rms_norm(x, self.t[prefix + ".weight"], self.eps)
        return layer_norm(x, self.t[prefix + ".weight"], self.t[prefix + ".bias"], self.eps)

    def rope(self, x, pos):
        # apply_rotary_pos_emb: pairs (2i, 2i + 1) of the first rot_dim dims.
        idx = torch.outer(pos.to(F64), self.theta)
        cache = torch.stack([idx.cos(), idx.sin()], dim=-1)  # [T, rot/2, 2]
        rot = cache.shape[-2] * 2
        xr, xp = x[..., :rot], x[..., rot:]
        xs = xr.reshape(x.shape[0], x.shape[1], rot // 2, 2)
        c = cache[:, None]
        out = torch.stack([xs[..., 0] * c[..., 0] - xs[..., 1] * c[..., 1],
                           xs[..., 1] * c[..., 0] + xs[..., 0] * c[..., 1]], -1).flatten(2)
        return torch.cat((out, xp), dim=-1)

    def step(self, ids, cache):
        t, p0, n = self.t, cache.length, len(ids)
        pos = torch.arange(n) + p0
        x = t["transformer.embedding.word_embeddings.weight"].to(F64)[torch.tensor(ids)]
        for i in range(self.layers):
            L = "transformer.encoder.layers.%d." % i
            h = self.norm(x, L + "input_layernorm")
            mixed = linear(h, t[L + "self_attention.query_key_value.weight"],
                           t.get(L + "self_attention.query_key_value.bias"))
            if self.mq:
                q, k, v = mixed.split([self.heads * self.hd, self.groups * self.hd,
                                       self.groups * self.hd], dim=-1)
                q = q.reshape(n, self.heads, self.hd)
                k = k.reshape(n, self.groups, self.hd)
                v = v.reshape(n, self.groups, self.hd)
            else:
                q, k, v = mixed.view(n, self.heads, 3 * self.hd).split(self.hd, dim=-1)
            q, k = self.rope(q, pos), self.rope(k, pos)
            k, v = cache.append(i, k, v)
            a = attention(q, k, v, p0, self.hd ** -0.5).reshape(n, -1)
            x = x + linear(a, t[L + "self_attention.dense.weight"])
            h = self.norm(x, L + "post_attention_layernorm")
            g = linear(h, t[L + "mlp.dense_h_to_4h.weight"]).chunk(2, dim=-1)
            x = x + linear(silu(g[0]) * g[1], t[L + "mlp.dense_4h_to_h.weight"])
        cache.length += n
        if self.c.get("post_layer_norm", True):
            x = self.norm(x, "transformer.encoder.final_layernorm")
        return linear(x, t["transformer.output_layer.weight"])


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)))


class ChatGLM6BPort:
    """A port (not transformers, which cannot run it) of the first ChatGLM-6B's
    modeling_chatglm.py (THUDM/chatglm-6b: ChatGLMForConditionalGeneration with
    position_encoding_2d), written from its definitions:
      * GLMBlock: attention_input = input_layernorm(x); h = attention_input * alpha +
        attention(attention_input); mlp_input = post_attention_layernorm(h);
        out = mlp_input * alpha + mlp(mlp_input), alpha = sqrt(2 * num_layers); GLU is
        dense_h_to_4h -> gelu_impl (the tanh form) -> dense_4h_to_h, all with biases;
        final_layernorm; lm_head tied to word_embeddings (from_pretrained ties them:
        tie_word_embeddings is left at its default and get_output_embeddings is lm_head);
      * SelfAttention: query_key_value viewed [heads, 3 * head_dim] and split into q, k,
        v; with position_encoding_2d each of q and k is chunked in two halves, the first
        turned by position_ids and the second by block_position_ids through
        RotaryEmbedding(head_dim // 2, base 10000) (inv_freq computed in float32 and kept
        in float16, .half(); cos/sin of cat(freqs, freqs); rotate_half);
      * attention_fn: query / (sqrt(head_dim) * (layer_id + 1)), masked_fill(-10000.0),
        scores * (layer_id + 1), softmax;
      * get_masks: causal, plus every query sees the keys before context_length (the
        index of bos_token_id, <sop>); get_position_ids (2-D): position_ids = arange with
        [context_length:] set to the mask position (the first [gMASK] when the prompt has
        one, else the first [MASK], as prepare_inputs_for_generation picks it),
        block_position_ids = 0 before context_length then 1, 2, ...;
      * generate(): each step feeds the last token with the position copied and the block
        position + 1 (_update_model_kwargs_for_generation), and a mask row that sees every
        earlier key and itself.
    Everything runs in float64; only inv_freq keeps the file's float16 rounding."""

    def __init__(self, config, t):
        self.c, self.t = config, t
        self.layers = config["num_layers"]
        self.heads = config["num_attention_heads"]
        self.hd = config["hidden_size"] // self.heads
        self.eps = config.get("layernorm_epsilon", 1e-5)
        self.alpha = (2 * self.layers) ** 0.5
        dim = self.hd // 2
        freq = 1. / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.inv_freq = freq.half().to(F64)
        self.positions = None  # [2, tokens so far]: position_ids, block_position_ids
        self.context_length = 0

    def layout(self, prompt):
        c = self.c
        mask = c["gmask_token_id"] if c["gmask_token_id"] in prompt else c["mask_token_id"]
        mask_position = prompt.index(mask)
        self.context_length = prompt.index(c["bos_token_id"])
        n = len(prompt)
        pos = torch.arange(n)
        pos[self.context_length:] = mask_position
        block = torch.cat((torch.zeros(self.context_length, dtype=torch.long),
                           torch.arange(n - self.context_length) + 1))
        self.positions = torch.stack((pos, block))

    def rope(self, x, pos):
        ang = pos.to(F64)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((ang, ang), dim=-1)[:, None, :]
        return x * emb.cos() + rotate_half(x) * emb.sin()

    def step(self, ids, cache):
        t, p0, n = self.t, cache.length, len(ids)
        if p0 == 0:
            self.layout(list(ids))
            pos = self.positions
        else:
            assert n == 1
            new = self.positions[:, -1:].clone()
            new[1] += 1
            self.positions = torch.cat((self.positions, new), dim=1)
            pos = new
        x = t["transformer.word_embeddings.weight"].to(F64)[torch.tensor(ids)]
        for i in range(self.layers):
            L = "transformer.layers.%d." % i
            ln = lambda y, name: layer_norm(y, t[L + name + ".weight"], t[L + name + ".bias"], self.eps)
            a_in = ln(x, "input_layernorm")
            mixed = linear(a_in, t[L + "attention.query_key_value.weight"],
                           t[L + "attention.query_key_value.bias"])
            q, k, v = mixed.view(n, self.heads, 3 * self.hd).split(self.hd, dim=-1)
            q1, q2 = q.chunk(2, dim=-1)
            k1, k2 = k.chunk(2, dim=-1)
            q = torch.cat((self.rope(q1, pos[0]), self.rope(q2, pos[1])), dim=-1)
            k = torch.cat((self.rope(k1, pos[0]), self.rope(k2, pos[1])), dim=-1)
            k, v = cache.append(i, k, v)
            coeff = float(i + 1)
            scores = torch.einsum("thd,lhd->htl", q / (math.sqrt(self.hd) * coeff), k)
            qidx = torch.arange(n)[:, None] + p0
            kidx = torch.arange(k.shape[0])[None, :]
            hidden = (kidx > qidx) & (kidx >= self.context_length)
            scores = scores.masked_fill(hidden[None], -10000.0) * coeff
            a = torch.einsum("htl,lhd->thd", torch.softmax(scores, dim=-1), v).reshape(n, -1)
            h = a_in * self.alpha + linear(a, t[L + "attention.dense.weight"],
                                           t[L + "attention.dense.bias"])
            m_in = ln(h, "post_attention_layernorm")
            g = gelu_tanh(linear(m_in, t[L + "mlp.dense_h_to_4h.weight"],
                                 t[L + "mlp.dense_h_to_4h.bias"]))
            x = m_in * self.alpha + linear(g, t[L + "mlp.dense_4h_to_h.weight"],
                                           t[L + "mlp.dense_4h_to_h.bias"])
        cache.length += n
        x = layer_norm(x, t["transformer.final_layernorm.weight"],
                       t["transformer.final_layernorm.bias"], self.eps)
        return linear(x, t["transformer.word_embeddings.weight"])


class QwenPort:
    """modeling_qwen.py (QWenLMHeadModel), including use_dynamic_ntk (alpha from the
    first forward's kv_seq_len, reused while decoding) and use_logn_attn."""

    def __init__(self, config, t):
        self.c, self.t = config, t
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.hidden = config["hidden_size"]
        self.hd = self.hidden // self.heads
        self.eps = config["layer_norm_epsilon"]
        self.seq_length = config["seq_length"]
        pct = config.get("rotary_pct", 1.0)
        self.rot = config["kv_channels"] if pct == 1.0 else int(config["kv_channels"] * pct)
        self.base = config.get("rotary_emb_base", 10000)
        logn = [math.log(i, self.seq_length) if i > self.seq_length else 1
                for i in range(1, 32768)]
        self.logn = torch.tensor(logn).to(F64)  # torch.tensor(list) is float32 first
        self.alpha_cached = [1.0]

    def ntk_alpha(self, true_seq_len):
        context_value = math.log(true_seq_len / self.seq_length, 2) + 1
        return max(2 ** math.ceil(context_value) - 1, 1)

    def step(self, ids, cache):
        t, p0, n = self.t, cache.length, len(ids)
        kv_seq_len = p0 + n
        if not self.c.get("use_dynamic_ntk", True):
            alpha = 1.0
        elif kv_seq_len != n:
            alpha = self.alpha_cached[0]
        else:
            alpha = self.ntk_alpha(kv_seq_len)
        self.alpha_cached = [alpha]
        base = self.base * alpha ** (self.rot / (self.rot - 2))
        freq = inv_freq(base, self.rot)
        pos = torch.arange(p0, kv_seq_len)  # rotary_pos_emb[:, -cur_len:]
        x = t["transformer.wte.weight"].to(F64)[torch.tensor(ids)]
        no_bias = self.c.get("no_bias", True)
        for i in range(self.layers):
            L = "transformer.h.%d." % i
            h = rms_norm(x, t[L + "ln_1.weight"], self.eps)
            mixed = linear(h, t[L + "attn.c_attn.weight"], t[L + "attn.c_attn.bias"])
            q, k, v = [m.reshape(n, self.heads, self.hd) for m in mixed.split(self.hidden, dim=-1)]
            q, k = rope_half(q, pos, freq), rope_half(k, pos, freq)
            k, v = cache.append(i, k, v)
            if k.shape[0] > self.seq_length and self.c.get("use_logn_attn", True):
                q = q * self.logn[k.shape[0] - n:k.shape[0]][:, None, None]
            a = attention(q, k, v, p0, self.hd ** -0.5).reshape(n, -1)
            x = x + linear(a, t[L + "attn.c_proj.weight"],
                           None if no_bias else t[L + "attn.c_proj.bias"])
            h = rms_norm(x, t[L + "ln_2.weight"], self.eps)
            a1 = linear(h, t[L + "mlp.w1.weight"], None if no_bias else t[L + "mlp.w1.bias"])
            a2 = linear(h, t[L + "mlp.w2.weight"], None if no_bias else t[L + "mlp.w2.bias"])
            x = x + linear(a1 * silu(a2), t[L + "mlp.c_proj.weight"],
                           None if no_bias else t[L + "mlp.c_proj.bias"])
        cache.length += n
        return linear(rms_norm(x, t["transformer.ln_f.weight"], self.eps), t["lm_head.weight"])


class InternLMPort:
    """modeling_internlm.py (InternLMForCausalLM): Llama with config.bias on q/k/v/o and
    the `rotary` object (origin, or dynamic NTK past max_position_embeddings)."""

    def __init__(self, config, t):
        self.c, self.t = config, t
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.hd = config["hidden_size"] // self.heads
        self.eps = config["rms_norm_eps"]
        self.bias = config.get("bias", True)
        rotary = config.get("rotary", {"base": 10000, "type": "dynamic"})
        self.rotary = rotary
        self.max_pos = config["max_position_embeddings"]

    def freq(self, seq_len):
        base, dim = self.rotary["base"], self.hd
        if self.rotary["type"] == "dynamic" and seq_len > self.max_pos:
            f = self.rotary.get("scaling_factor", 1.0)
            base = base * ((f * seq_len / self.max_pos) - (f - 1)) ** (dim / (dim - 2))
        return inv_freq(base, dim)

    def step(self, ids, cache):
        t, p0, n = self.t, cache.length, len(ids)
        pos = torch.arange(n) + p0
        freq = self.freq(p0 + n)
        x = t["model.embed_tokens.weight"].to(F64)[torch.tensor(ids)]
        b = (lambda name: t[name]) if self.bias else (lambda name: None)
        for i in range(self.layers):
            L = "model.layers.%d.self_attn." % i
            P = "model.layers.%d." % i
            h = rms_norm(x, t[P + "input_layernorm.weight"], self.eps)
            q = linear(h, t[L + "q_proj.weight"], b(L + "q_proj.bias")).view(n, self.heads, self.hd)
            k = linear(h, t[L + "k_proj.weight"], b(L + "k_proj.bias")).view(n, self.heads, self.hd)
            v = linear(h, t[L + "v_proj.weight"], b(L + "v_proj.bias")).view(n, self.heads, self.hd)
            q, k = rope_half(q, pos, freq), rope_half(k, pos, freq)
            k, v = cache.append(i, k, v)
            a = attention(q, k, v, p0, self.hd ** -0.5).reshape(n, -1)
            x = x + linear(a, t[L + "o_proj.weight"], b(L + "o_proj.bias"))
            h = rms_norm(x, t[P + "post_attention_layernorm.weight"], self.eps)
            g = silu(linear(h, t[P + "mlp.gate_proj.weight"])) * linear(h, t[P + "mlp.up_proj.weight"])
            x = x + linear(g, t[P + "mlp.down_proj.weight"])
        cache.length += n
        return linear(rms_norm(x, t["model.norm.weight"], self.eps), t["lm_head.weight"])


class InternLM2Port:
    """modeling_internlm2.py (InternLM2ForCausalLM): wqkv rearranged
    "b q (h gs d) -> b q h gs d" with gs = 2 + num_key_value_groups."""

    def __init__(self, config, t):
        self.c, self.t = config, t
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config["num_key_value_heads"]
        self.groups = self.heads // self.kv_heads
        self.hd = config["hidden_size"] // self.heads
        self.eps = config["rms_norm_eps"]
        self.max_pos = config["max_position_embeddings"]
        self.scaling = config.get("rope_scaling")
        self.theta = config.get("rope_theta", 10000)

    def freq(self, seq_len):
        base, dim = self.theta, self.hd
        if self.scaling and self.scaling["type"] == "dynamic" and seq_len > self.max_pos:
            f = self.scaling["factor"]
            base = base * ((f * seq_len / self.max_pos) - (f - 1)) ** (dim / (dim - 2))
        freq = inv_freq(base, dim)
        if self.scaling and self.scaling["type"] == "linear":
            freq = freq / self.scaling["factor"]
        return freq

    def step(self, ids, cache):
        t, p0, n = self.t, cache.length, len(ids)
        pos = torch.arange(n) + p0
        freq = self.freq(p0 + n)
        x = t["model.tok_embeddings.weight"].to(F64)[torch.tensor(ids)]
        for i in range(self.layers):
            L = "model.layers.%d." % i
            h = rms_norm(x, t[L + "attention_norm.weight"], self.eps)
            qkv = linear(h, t[L + "attention.wqkv.weight"], t.get(L + "attention.wqkv.bias"))
            qkv = qkv.view(n, self.kv_heads, 2 + self.groups, self.hd)
            q = qkv[:, :, :self.groups].reshape(n, self.heads, self.hd)
            k, v = qkv[:, :, -2], qkv[:, :, -1]
            q, k = rope_half(q, pos, freq), rope_half(k, pos, freq)
            k, v = cache.append(i, k, v)
            a = attention(q, k, v, p0, self.hd ** -0.5).reshape(n, -1)
            x = x + linear(a, t[L + "attention.wo.weight"], t.get(L + "attention.wo.bias"))
            h = rms_norm(x, t[L + "ffn_norm.weight"], self.eps)
            g = silu(linear(h, t[L + "feed_forward.w1.weight"])) * linear(h, t[L + "feed_forward.w3.weight"])
            x = x + linear(g, t[L + "feed_forward.w2.weight"])
        cache.length += n
        return linear(rms_norm(x, t["model.norm.weight"], self.eps), t["output.weight"])


def openelm_make_divisible(v, divisor):
    """configuration_openelm.make_divisible with min_value = divisor."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def openelm_layer_shapes(config):
    """OpenELMConfig.__post_init__: the per-layer query heads, KV heads and FFN widths
    recomputed from qkv_multipliers / ffn_multipliers (a pair is interpolated with
    numpy.linspace over the layers and rounded to 2 decimals)."""
    import numpy as np
    layers, model_dim, hd = (config["num_transformer_layers"], config["model_dim"],
                             config["head_dim"])
    groups = config.get("num_gqa_groups", 1)

    def spread(m):
        if isinstance(m, (int, float)):
            return [m] * layers
        if len(m) == 2:
            return [round(v, 2) for v in np.linspace(m[0], m[1], num=layers, dtype=float)]
        assert len(m) == layers
        return list(m)

    q_dims = [int(openelm_make_divisible(model_dim * m, hd * groups))
              for m in spread(config.get("qkv_multipliers", 1.0))]
    heads = [q // hd for q in q_dims]
    kv_heads = [h // groups for h in heads]
    inter = [int(openelm_make_divisible(m * model_dim, config.get("ffn_dim_divisor", 256)))
             for m in spread(config.get("ffn_multipliers", 4.0))]
    return heads, kv_heads, inter


class OpenELMPort:
    """modeling_openelm.py (OpenELMForCausalLM): per-layer heads and FFN widths (layer-wise
    scaling), qkv_proj rows [q heads; k heads; v heads], q/k RMSNorm per head before the
    cache, rotary applied after it to every cached key (positions 0..) and to the
    queries (the last positions), proj_1 rows [gate; up], RMSNorm eps 1e-6, the output
    layer the embedding table with share_input_output_layers."""

    def __init__(self, config, t):
        self.c, self.t = config, t
        self.layers = config["num_transformer_layers"]
        self.hd = config["head_dim"]
        self.heads, self.kv_heads, self.inter = openelm_layer_shapes(config)
        self.eps = 1e-6
        self.freq = inv_freq(config.get("rope_freq_constant", 10000), self.hd)
        assert config.get("activation_fn_name", "swish") == "swish"

    def step(self, ids, cache):
        t, p0, n, hd = self.t, cache.length, len(ids), self.hd
        x = t["transformer.token_embeddings.weight"].to(F64)[torch.tensor(ids)]
        for i in range(self.layers):
            L = "transformer.layers.%d." % i
            qh, kh = self.heads[i], self.kv_heads[i]
            h = rms_norm(x, t[L + "attn_norm.weight"], self.eps)
            qkv = linear(h, t[L + "attn.qkv_proj.weight"]).view(n, qh + 2 * kh, hd)
            q, k, v = qkv[:, :qh], qkv[:, qh:qh + kh], qkv[:, qh + kh:]
            if self.c.get("normalize_qk_projections", False):
                q = rms_norm(q, t[L + "attn.q_norm.weight"], self.eps)
                k = rms_norm(k, t[L + "attn.k_norm.weight"], self.eps)
            k, v = cache.append(i, k, v)
            keys = k.shape[0]
            q = rope_half(q, torch.arange(keys - n, keys), self.freq)
            k = rope_half(k, torch.arange(keys), self.freq)
            a = attention(q, k, v, p0, hd ** -0.5).reshape(n, -1)
            x = x + linear(a, t[L + "attn.out_proj.weight"])
            h = rms_norm(x, t[L + "ffn_norm.weight"], self.eps)
            y = linear(h, t[L + "ffn.proj_1.weight"])
            if self.c.get("ffn_with_glu", True):
                y1, y2 = y.chunk(2, dim=-1)
                y = silu(y1) * y2
            else:
                y = silu(y)
            x = x + linear(y, t[L + "ffn.proj_2.weight"])
        cache.length += n
        x = rms_norm(x, t["transformer.norm.weight"], self.eps)
        out = t["transformer.token_embeddings.weight"] if self.c.get(
            "share_input_output_layers", False) else t["lm_head.weight"]
        return linear(x, out)[:, :self.c["vocab_size"]]


def decilm_ffn_size(ffn_mult, hidden):
    """modeling_decilm._ffn_mult_to_intermediate_size."""
    n = int(2 * ffn_mult * hidden / 3)
    return n if n % 256 == 0 else n + 256 - n % 256


class DeciLMPort:
    """modeling_decilm.py (DeciLMForCausalLM, Nemotron-NAS): Llama whose layers follow
    block_configs: an attention block that is a no-op, a linear map of the normed input
    (self_attn.linear_attn), or attention with num_attention_heads / n_heads_in_group
    KV heads; an FFN that is a no-op, a linear map (mlp.linear_mlp) or a SiLU-gated MLP
    of width 2 * ffn_mult * hidden / 3 rounded up to 256."""

    def __init__(self, config, t):
        self.c, self.t = config, t
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.hd = config["hidden_size"] // self.heads
        self.eps = config["rms_norm_eps"]
        self.freq = inv_freq(config.get("rope_theta", 10000.0), self.hd)
        assert config.get("hidden_act", "silu") == "silu" and not config.get("rope_scaling")

    def step(self, ids, cache):
        t, p0, n = self.t, cache.length, len(ids)
        pos = torch.arange(n) + p0
        x = t["model.embed_tokens.weight"].to(F64)[torch.tensor(ids)]
        for i, block in enumerate(self.c["block_configs"]):
            L = "model.layers.%d." % i
            attn, ffn = block["attention"], block["ffn"]
            if not attn["no_op"]:
                h = rms_norm(x, t[L + "input_layernorm.weight"], self.eps)
                if attn["replace_with_linear"]:
                    x = x + linear(h, t[L + "self_attn.linear_attn.weight"])
                else:
                    kv = self.heads // attn["n_heads_in_group"]
                    q = linear(h, t[L + "self_attn.q_proj.weight"]).view(n, self.heads, self.hd)
                    k = linear(h, t[L + "self_attn.k_proj.weight"]).view(n, kv, self.hd)
                    v = linear(h, t[L + "self_attn.v_proj.weight"]).view(n, kv, self.hd)
                    q, k = rope_half(q, pos, self.freq), rope_half(k, pos, self.freq)
                    k, v = cache.append(i, k, v)
                    a = attention(q, k, v, p0, self.hd ** -0.5).reshape(n, -1)
                    x = x + linear(a, t[L + "self_attn.o_proj.weight"])
            if not ffn["no_op"]:
                h = rms_norm(x, t[L + "post_attention_layernorm.weight"], self.eps)
                if ffn["replace_with_linear"]:
                    x = x + linear(h, t[L + "mlp.linear_mlp.weight"])
                else:
                    g = silu(linear(h, t[L + "mlp.gate_proj.weight"])) * linear(
                        h, t[L + "mlp.up_proj.weight"])
                    x = x + linear(g, t[L + "mlp.down_proj.weight"])
        cache.length += n
        return linear(rms_norm(x, t["model.norm.weight"], self.eps), t["lm_head.weight"])


# ----------------------------------------------------------------------------------------
# Running a port: prompt logits and greedy decoding through the cache
# ----------------------------------------------------------------------------------------
def run_case(make_port, layers, input_ids, new_tokens=10):
    port = make_port()
    cache = Cache(layers)
    logits = port.step(list(input_ids), cache)
    prompt_logits = logits
    greedy, margins = [], []
    row = logits[-1]
    while True:
        top = torch.topk(row, 2).values
        margins.append(float(top[0] - top[1]))
        greedy.append(int(row.argmax()))
        if len(greedy) == new_tokens:
            break
        row = port.step([greedy[-1]], cache)[-1]
    return prompt_logits, greedy, min(margins)


def check_twin(label, make_port, layers, cases, tol=1e-5):
    worst = 0.0
    for i, c in enumerate(cases):
        logits, greedy, _ = run_case(make_port, layers, c["input_ids"], len(c["greedy_new_ids"]))
        worst = max(worst, float((logits - c["logits"]).abs().max()))
        if greedy != c["greedy_new_ids"]:
            sys.exit("%s: case %d greedy %s != reference %s" % (label, i, greedy, c["greedy_new_ids"]))
    # The references are float32 roundings of float64 logits.
    if worst > tol:
        sys.exit("%s: logits differ from the reference by %g" % (label, worst))
    print("  %-44s matches the Hugging Face reference (max |diff| %.2e)" % (label, worst))
