#!/usr/bin/env python3
"""Creates the LLaVA-1.5 conformance fixtures: tiny LlavaForConditionalGeneration
checkpoints (a tiny CLIP vision tower, LLaVA's projector, a tiny llama text model) with
transformers' reference outputs, in the format of tests/conformance/fixtures (README.md
there; these live under its vision/ group).

    python3 scripts/make_vision_fixtures.py OUT_DIR

Needs torch and transformers (5.x). Writes OUT_DIR/vision/<name>/ (config.json,
weights.json, reference.json, reference.safetensors) for every variant, then
OUT_DIR/vision.tar.gz. The weights are not kept: weights.json (scripts/fixture_weights.py)
regenerates them bit for bit at test time, and this script checks that it does.

Each checkpoint: CLIP with 2 layers, hidden 32, patch 14; llama with 2 layers, hidden 64,
vocab 512, the last id the image token. Seeded random weights (make_fixtures.py's
scheme, the patch embedding drawn as a matrix [hidden, 3 * patch * patch]) and seeded
random pixel_values (stored: reference.safetensors image{i} [3, H, W] float32).
References, the checkpoint reloaded with from_pretrained in float64 with eager attention on
the CPU:
- image{i}.features: the selected vision features (vision_feature_layer, select strategy)
  before the projector, [tokens, vision hidden x layers];
- image{i}.embeds: the projector's output [tokens, text hidden], checked equal to
  get_image_features;
- case{k}.logits [len(input_ids), vocab]: prompts holding one image, two images, and the
  first image twice (the image token repeated tokens-per-image times for each), with
  greedy_new_ids (10 tokens, full recomputation with the images) and their margins.
Variants: `llava` (vision_feature_layer -2, "default" strategy, quick_gelu, 42 px: 9 image
tokens, saved as save_pretrained writes it) and `llava_full` (vision_feature_layer
[-2, -1], "full" strategy, gelu, 28 px: 5 image tokens, the weights renamed into the other
of the two layouts: llava-hf's language_model.model.* / vision_tower.* /
multi_modal_projector.* or transformers 5's model.language_model.* / model.vision_tower.*
/ model.multi_modal_projector.*, and checked to load to the same model).
"""

import json
import math
import os
import shutil
import sys
import tarfile
import zlib

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_weights  # noqa: E402
from make_fixtures import write_weights_manifest, checkpoint_tensors  # noqa: E402

VOCAB = 512
IMAGE_TOKEN = VOCAB - 1
NUM_NEW = 10

TEXT = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5, hidden_act="silu",
            max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=1,
            eos_token_id=2)

VARIANTS = {
    "llava": dict(image_size=42, hidden_act="quick_gelu", feature_layer=-2, strategy="default",
                  relayout=False),
    "llava_full": dict(image_size=28, hidden_act="gelu", feature_layer=[-2, -1], strategy="full",
                       relayout=True),
}


def seed_of(name):
    return zlib.crc32(("vision/" + name).encode()) & 0x7FFFFFFF


def draw_weights(model, seed):
    """make_fixtures.scale_weights, with >2-d parameters (the patch convolution) drawn and
    listed as matrices [out, rest]."""
    gen = torch.Generator().manual_seed(seed)
    stream = {"seed": seed, "skip": 0, "tensors": []}
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            shape = list(p.shape)
            rows = [shape[0], math.prod(shape[1:])] if len(shape) > 2 else shape
            if len(shape) >= 2:
                table = "embed_tokens" in name or "position_embedding" in name
                kind, std = "scaled", 1.0 if table else 1.0 / math.sqrt(rows[1])
            elif name.endswith("bias"):
                kind, std = "scaled", 0.1
            else:
                kind, std = "norm", None
            z = torch.randn(rows, generator=gen, dtype=torch.float64)
            v = z.to(torch.float32) * std if kind == "scaled" else (1.0 + 0.1 * z).to(torch.float32)
            p.copy_(v.reshape(shape).to(p.dtype))
            t = {"name": name, "shape": rows, "kind": kind}
            if std is not None:
                t["std"] = float(torch.tensor(std, dtype=torch.float32))
            stream["tensors"].append(t)
    return stream


def other_layout(name):
    """A tensor's name in the other LLaVA layout."""
    pairs = [("model.language_model.", "language_model.model."),
             ("model.vision_tower.", "vision_tower."),
             ("model.multi_modal_projector.", "multi_modal_projector."),
             ("lm_head.", "language_model.lm_head.")]
    for new, old in pairs:
        if name.startswith(new):
            return old + name[len(new):]
    for new, old in pairs:
        if name.startswith(old):
            return new + name[len(old):]
    raise ValueError("unexpected tensor name " + name)


def load_f64(path):
    model = transformers.LlavaForConditionalGeneration.from_pretrained(
        path, dtype=torch.float64, attn_implementation="eager")
    model.eval()
    return model


def inner(model):
    return model.model if hasattr(model, "model") and hasattr(model.model, "vision_tower") else model


@torch.no_grad()
def image_features(model, pixels, layer, strategy):
    """The selected features before the projector, as LlavaModel.get_image_features
    selects them."""
    out = inner(model).vision_tower(pixels, output_hidden_states=True)
    layers = [layer] if isinstance(layer, int) else layer
    hs = [out.hidden_states[i] for i in layers]
    if strategy == "default":
        hs = [h[:, 1:] for h in hs]
    return torch.cat(hs, dim=-1)


@torch.no_grad()
def logits_of(model, ids, pixels):
    kw = {"pixel_values": pixels} if pixels is not None else {}
    return model(input_ids=torch.tensor([ids]), use_cache=False, **kw).logits[0]


@torch.no_grad()
def greedy(model, ids, pixels):
    ids = list(ids)
    new, margin = [], float("inf")
    for _ in range(NUM_NEW):
        last = logits_of(model, ids, pixels)[-1]
        top = torch.topk(last, 2)
        margin = min(margin, float(top.values[0] - top.values[1]))
        nxt = int(top.indices[0])
        new.append(nxt)
        ids.append(nxt)
    return new, margin


def make_variant(root, name):
    v = VARIANTS[name]
    path = os.path.join(root, "vision", name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    seed = seed_of(name)
    torch.manual_seed(seed)
    vision = transformers.CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        image_size=v["image_size"], patch_size=14, num_channels=3, hidden_act=v["hidden_act"],
        layer_norm_eps=1e-5, projection_dim=32)
    text = transformers.LlamaConfig(**TEXT)
    config = transformers.LlavaConfig(
        vision_config=vision, text_config=text, image_token_index=IMAGE_TOKEN,
        vision_feature_layer=v["feature_layer"], vision_feature_select_strategy=v["strategy"],
        projector_hidden_act="gelu")
    for attr in ("image_token_index", "image_token_id"):  # the spelling of either version
        setattr(config, attr, IMAGE_TOKEN)
    model = transformers.LlavaForConditionalGeneration(config).to(torch.float32)
    stream = draw_weights(model, seed)
    model.save_pretrained(path, safe_serialization=True)
    del model
    st = os.path.join(path, "model.safetensors")
    with safe_open(st, framework="pt") as f:
        saved_keys = sorted(f.keys())
    layout = "transformers5" if saved_keys[0].startswith("lm_head") or any(
        k.startswith("model.language_model.") for k in saved_keys) else "llava-hf"
    if v["relayout"]:
        before = load_f64(path)
        with safe_open(st, framework="pt") as f:
            meta = f.metadata()
            tensors = {other_layout(k): f.get_tensor(k) for k in f.keys()}
        save_file(tensors, st, metadata=meta)
        after = load_f64(path)
        a, b = before.state_dict(), after.state_dict()
        assert sorted(a) == sorted(b)
        for k in a:
            assert torch.equal(a[k], b[k]), k
        layout = "llava-hf" if layout == "transformers5" else "transformers5"
        del before, after

    model = load_f64(path)
    n_img = 3
    size = v["image_size"]
    gen = torch.Generator().manual_seed(seed + 1)
    images = [torch.randn((3, size, size), generator=gen, dtype=torch.float32) for _ in range(n_img - 1)]
    per_image = (size // 14) ** 2 + (1 if v["strategy"] == "full" else 0)
    tensors = {}
    for i, img in enumerate(images):
        px = img.unsqueeze(0).to(torch.float64)
        feats = image_features(model, px, v["feature_layer"], v["strategy"])[0]
        embeds = inner(model).multi_modal_projector(feats)
        ref = inner(model).get_image_features(
            pixel_values=px, vision_feature_layer=v["feature_layer"],
            vision_feature_select_strategy=v["strategy"])
        while not torch.is_tensor(ref):  # a tensor, a list of them or an output object
            ref = ref[0] if isinstance(ref, (list, tuple)) else getattr(ref, "pooler_output")
        if not torch.allclose(ref.reshape(embeds.shape), embeds, atol=1e-12):
            sys.exit(f"{name}: the projector's output differs from get_image_features")
        assert feats.shape[0] == per_image
        tensors[f"image{i}"] = img.contiguous()
        tensors[f"image{i}.features"] = feats.to(torch.float32).contiguous()
        tensors[f"image{i}.embeds"] = embeds.to(torch.float32).contiguous()

    # Prompts: text, image, text (one image); text, image 0, text, image 1, text; and
    # image 0 twice. Redrawn until every greedy margin is at least 4e-3 and no greedy token
    # is the image token.
    layouts = [[5, [0], 4], [3, [0], 2, [1], 3], [2, [0], 3, [0], 1]]
    cases = []
    for k, lay in enumerate(layouts):
        for attempt in range(50):
            ids, used = [], []
            for part in lay:
                if isinstance(part, list):
                    ids += [IMAGE_TOKEN] * per_image
                    used += part
                else:
                    ids += torch.randint(3, IMAGE_TOKEN, (part,), generator=gen).tolist()
            px = torch.stack([images[i] for i in used]).to(torch.float64)
            new, margin = greedy(model, ids, px)
            if margin >= 4e-3 and IMAGE_TOKEN not in new:
                break
        else:
            sys.exit(f"{name}: no prompt of layout {lay} with a greedy margin of 4e-3")
        tensors[f"case{k}.logits"] = logits_of(model, ids, px).to(torch.float32).contiguous()
        cases.append({"input_ids": ids, "images": used, "greedy_new_ids": new,
                      "min_greedy_margin": margin})
    save_file(tensors, os.path.join(path, "reference.safetensors"))
    del model

    ref = {
        "arch": "LlavaForConditionalGeneration",
        "layout": layout,
        "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, float64, eager attention",
        "image_token_id": IMAGE_TOKEN,
        "tokens_per_image": per_image,
        "images": "reference.safetensors: image{i} [3, H, W] float32 pixel_values, image{i}.features, image{i}.embeds",
        "logits": "reference.safetensors holds caseN.logits [len(input_ids), vocab_size] float32",
        "cases": cases,
        "checkpoint_tensors": checkpoint_tensors(path),
    }
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    write_weights_manifest(path, stream)
    print(f"{name}: layout {layout}, {per_image} tokens per image, margins "
          + ", ".join(f"{c['min_greedy_margin']:.4f}" for c in cases))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = os.path.abspath(sys.argv[1])
    torch.set_grad_enabled(False)
    for name in VARIANTS:
        make_variant(out, name)
    with tarfile.open(os.path.join(out, "vision.tar.gz"), "w:gz") as tar:
        tar.add(os.path.join(out, "vision"), arcname="vision")
    print("wrote", os.path.join(out, "vision.tar.gz"))


if __name__ == "__main__":
    main()
