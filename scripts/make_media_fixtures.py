#!/usr/bin/env python3
"""Makes the media module's reference fixtures (tests/media/fixtures) with PIL and
transformers' image processors: small test images in each format and mode the decoders
take, what `Image.open(f).convert("RGB")` gives for each, PIL's resize of a few of them,
and the processors' outputs for small configurations.

Usage: python3 scripts/make_media_fixtures.py OUT_DIR
Writes OUT_DIR/fixtures.tar.gz (unpack it into tests/media/fixtures).
"""
import io
import json
import os
import struct
import sys
import tarfile
import zlib

import numpy as np
from PIL import Image
import PIL
import transformers
# The processors' PIL form: transformers 5 names it <Model>ImageProcessorPil (the plain
# name is the torchvision form there, which differs from PIL's resize by one level in a
# few samples); older versions have only the PIL form, under the plain name.
try:
    from transformers import CLIPImageProcessorPil as CLIPImageProcessor
    from transformers import Qwen2VLImageProcessorPil as Qwen2VLImageProcessor
except ImportError:
    from transformers import CLIPImageProcessor, Qwen2VLImageProcessor
try:
    from transformers import LlavaNextImageProcessorPil as LlavaNextImageProcessor
except ImportError:
    from transformers import LlavaNextImageProcessor

FILES = {}  # name -> bytes
MANIFEST = {"pil": PIL.__version__, "transformers": transformers.__version__,
            "processor_classes": [CLIPImageProcessor.__name__, Qwen2VLImageProcessor.__name__,
                                  LlavaNextImageProcessor.__name__],
            "decode": [], "unsupported": [], "resize": [], "processors": []}


def synth(w, h, seed, channels=3):
    """A smooth gradient with texture and a few hard edges: exercises every filter tap."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    planes = []
    for c in range(channels):
        p = 128 + 90 * np.sin(x / (3.0 + c) + seed) * np.cos(y / (4.5 - c * 0.7))
        p += rng.normal(0, 18, size=(h, w))
        p[(x.astype(int) // 7 + y.astype(int) // 5 + c) % 4 == 0] = 250 - 40 * c
        planes.append(p)
    return np.clip(np.stack(planes, axis=-1), 0, 255).astype(np.uint8)


def png_raw(w, h, color_type, depth, rows, interlace=False, palette=None, trns=None):
    """A PNG written by hand (PIL writes neither 16-bit colour nor interlaced PNGs).
    rows: a numpy array [h, w, samples] of the sample values."""
    samples = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type]

    def pack(sub):
        out = bytearray()
        for row in sub:
            out.append(0)
            flat = row.reshape(-1)
            if depth == 16:
                out += flat.astype(">u2").tobytes()
            elif depth == 8:
                out += flat.astype(np.uint8).tobytes()
            else:
                bits = "".join(format(int(v), "0%db" % depth) for v in flat)
                bits += "0" * (-len(bits) % 8)
                out += bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
        return bytes(out)

    if interlace:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                  (0, 1, 1, 2)]
        data = b""
        for x0, y0, dx, dy in passes:
            sub = rows[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                data += pack(sub)
    else:
        data = pack(rows)

    def chunk(t, b):
        c = struct.pack(">I", len(b)) + t + b
        return c + struct.pack(">I", zlib.crc32(t + b) & 0xFFFFFFFF)

    out = b"\x89PNG\r\n\x1a\n"
    out += chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 1 if interlace else 0))
    if palette is not None:
        out += chunk(b"PLTE", bytes(palette))
    if trns is not None:
        out += chunk(b"tRNS", trns)
    out += chunk(b"IDAT", zlib.compress(data, 9))
    out += chunk(b"IEND", b"")
    assert samples
    return out


def add_decode(name, data):
    im = Image.open(io.BytesIO(data))
    mode, fmt = im.mode, im.format
    rgb = im.convert("RGB")
    FILES["images/" + name] = data
    ref = io.BytesIO()
    rgb.save(ref, format="PNG")
    FILES["decoded/" + name + ".png"] = ref.getvalue()
    MANIFEST["decode"].append({"file": name, "format": fmt, "mode": mode,
                               "width": rgb.width, "height": rgb.height})


def save(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, format=fmt, **kw)
    return b.getvalue()


def img(mode, w, h, seed):
    return Image.frombytes(mode, (w, h), synth(w, h, seed, channels=len(mode)).tobytes())


def make_images():
    rgb = img("RGB", 37, 23, 1)
    tall = img("RGB", 24, 41, 2)
    sq = img("RGB", 32, 32, 3)
    rgba = img("RGBA", 29, 19, 4)
    gray = img("L", 33, 21, 5)

    # JPEG
    add_decode("baseline.jpg", save(rgb, "JPEG", quality=85))
    add_decode("baseline444.jpg", save(tall, "JPEG", quality=92, subsampling=0))
    add_decode("baseline422.jpg", save(sq, "JPEG", quality=75, subsampling=1))
    add_decode("progressive.jpg", save(rgb, "JPEG", quality=80, progressive=True))
    add_decode("gray.jpg", save(gray, "JPEG", quality=90))
    add_decode("cmyk.jpg", save(img("CMYK", 26, 18, 6), "JPEG", quality=90))
    # PNG (PIL-written)
    add_decode("rgb.png", save(rgb, "PNG"))
    add_decode("rgba.png", save(rgba, "PNG"))
    add_decode("gray.png", save(gray, "PNG"))
    add_decode("gray_alpha.png", save(Image.merge("LA", (gray, gray.transpose(Image.FLIP_LEFT_RIGHT))), "PNG"))
    pal = rgb.quantize(colors=23)
    add_decode("palette.png", save(pal, "PNG"))
    pal_t = rgb.quantize(colors=11)
    pal_t.info["transparency"] = 3
    add_decode("palette_trns.png", save(pal_t, "PNG", transparency=3))
    add_decode("bilevel.png", save(gray.point(lambda v: 255 if v > 128 else 0).convert("1"), "PNG"))
    # PNG (hand-written): 16-bit, sub-byte depths, interlaced
    g16 = (synth(19, 13, 7, channels=1).astype(np.uint16) * 3 + 40)  # spans 40..805
    add_decode("gray16.png", png_raw(19, 13, 0, 16, g16))
    c16 = synth(21, 14, 8).astype(np.uint16) * 257 + np.arange(21, dtype=np.uint16)[None, :, None] * 7
    add_decode("rgb16.png", png_raw(21, 14, 2, 16, c16))
    a16 = synth(17, 11, 9, channels=4).astype(np.uint16) * 251
    add_decode("rgba16.png", png_raw(17, 11, 6, 16, a16))
    add_decode("gray_alpha16.png", png_raw(17, 11, 4, 16, a16[:, :, :2]))
    add_decode("gray4.png", png_raw(15, 9, 0, 4, synth(15, 9, 10, channels=1) // 16))
    add_decode("gray2.png", png_raw(13, 7, 0, 2, synth(13, 7, 11, channels=1) // 64))
    palette = [int(v) for v in synth(16, 1, 12).reshape(-1)]
    add_decode("palette4.png", png_raw(14, 10, 3, 4, synth(14, 10, 13, channels=1) // 16, palette=palette))
    add_decode("interlaced.png", png_raw(23, 17, 2, 8, synth(23, 17, 14), interlace=True))
    add_decode("interlaced_gray16.png", png_raw(11, 9, 0, 16, g16[:9, :11], interlace=True))
    add_decode("gray_trns.png", png_raw(12, 8, 0, 8, synth(12, 8, 15, channels=1), trns=b"\x00\x80"))
    # WebP
    add_decode("lossy.webp", save(rgb, "WEBP", quality=80))
    add_decode("lossless.webp", save(tall, "WEBP", lossless=True))
    add_decode("lossy_alpha.webp", save(rgba, "WEBP", quality=70))
    add_decode("lossless_alpha.webp", save(rgba, "WEBP", lossless=True, exact=True))
    # Formats the decoders refuse.
    for name, fmt in (("image.gif", "GIF"), ("image.bmp", "BMP"), ("image.tiff", "TIFF")):
        FILES["images/" + name] = save(rgb, fmt)
        MANIFEST["unsupported"].append({"file": name, "format": fmt})
    return {"rgb": rgb, "tall": tall, "sq": sq}


def add_resize(src_name, img, w, h, filt):
    out = img.resize((w, h), resample={"bicubic": Image.BICUBIC, "bilinear": Image.BILINEAR}[filt])
    key = "resize/%s_%dx%d_%s.png" % (src_name, w, h, filt)
    FILES[key] = save(out, "PNG")
    MANIFEST["resize"].append({"source": "decoded/%s.png" % src_name, "width": w, "height": h,
                               "filter": filt, "expected": key})


def safetensors(tensors):
    header, blobs, off = {}, b"", 0
    for name, arr in tensors.items():
        b = np.ascontiguousarray(arr).tobytes()
        dt = {np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}[arr.dtype]
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs += b
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blobs


def add_processor(kind, config, src, pad=False, tag=""):
    try:
        add_processor_(kind, config, src, pad, tag)
    except Exception as e:  # an older transformers refusing a case: recorded, not fatal
        print("processor case failed:", kind, src, tag, repr(e))
        MANIFEST.setdefault("failed", []).append({"kind": kind, "image": src, "error": repr(e)})


def add_processor_(kind, config, src, pad, tag):
    if kind == "clip":
        proc = CLIPImageProcessor(**config)
    elif kind == "llava_next":
        proc = LlavaNextImageProcessor(**config)
    else:
        proc = Qwen2VLImageProcessor(**config)
    img = Image.open(io.BytesIO(FILES["images/" + src])).convert("RGB")
    if pad:  # LLaVA's image_aspect_ratio "pad": expand to a square of the mean colour
        bg = tuple(int(x * 255) for x in proc.image_mean)
        w, h = img.size
        if w != h:
            s = max(w, h)
            sqr = Image.new(img.mode, (s, s), bg)
            sqr.paste(img, ((s - w) // 2, (s - h) // 2))
            img = sqr
    out = proc(images=[img], return_tensors="np")
    name = "%s_%s%s" % (kind, src.replace(".", "_"), tag)
    tensors = {"pixel_values": out["pixel_values"].astype(np.float32)}
    if "image_grid_thw" in out:
        tensors["image_grid_thw"] = out["image_grid_thw"].astype(np.int64)
    if "image_sizes" in out:
        tensors["image_sizes"] = np.asarray(out["image_sizes"]).astype(np.int64)
    FILES["processors/%s.safetensors" % name] = safetensors(tensors)
    FILES["processors/%s.json" % name] = proc.to_json_string().encode()
    MANIFEST["processors"].append({"kind": kind, "image": "images/" + src, "pad": pad,
                                   "config": "processors/%s.json" % name,
                                   "expected": "processors/%s.safetensors" % name})


def main():
    out_dir = sys.argv[1]
    make_images()
    for src in ("baseline.jpg", "rgb.png", "baseline444.jpg"):
        im = Image.open(io.BytesIO(FILES["images/" + src])).convert("RGB")
        w, h = im.size
        for filt in ("bicubic", "bilinear"):
            for (nw, nh) in ((w // 2, h // 2), (13, 11), (w * 2 - 3, h + 5), (w + 1, 7), (5, 3), (w, h * 3 // 2)):
                add_resize(src, im, max(nw, 1), max(nh, 1), filt)
    clip = {"size": {"shortest_edge": 32}, "crop_size": {"height": 32, "width": 32}}
    add_processor("clip", clip, "baseline.jpg")
    add_processor("clip", clip, "baseline444.jpg")
    add_processor("clip", {"size": {"shortest_edge": 40}, "crop_size": {"height": 28, "width": 36}},
                  "rgba.png")
    add_processor("clip", clip, "baseline.jpg", pad=True, tag="_pad")
    add_processor("clip", {"size": {"shortest_edge": 48}, "crop_size": {"height": 64, "width": 64}},
                  "gray.png", tag="_small")
    qwen = {"min_pixels": 8 * 8 * 4, "max_pixels": 48 * 48, "patch_size": 4, "merge_size": 2,
            "temporal_patch_size": 2}
    add_processor("qwen2vl", qwen, "baseline.jpg")
    add_processor("qwen2vl", qwen, "progressive.jpg", tag="_b")
    add_processor("qwen2vl", dict(qwen, max_pixels=24 * 24), "baseline444.jpg")
    add_processor("qwen2vl", dict(qwen, min_pixels=64 * 64, max_pixels=96 * 96), "lossy.webp")
    add_processor("qwen2vl", {"min_pixels": 28 * 28, "max_pixels": 28 * 56, "patch_size": 14,
                              "merge_size": 2, "temporal_patch_size": 2}, "palette.png")
    nxt = {"size": {"shortest_edge": 16}, "crop_size": {"height": 16, "width": 16},
           "image_grid_pinpoints": [[16, 32], [32, 16], [32, 32], [16, 48], [48, 16]]}
    add_processor("llava_next", nxt, "baseline.jpg")
    add_processor("llava_next", nxt, "baseline444.jpg")
    add_processor("llava_next", nxt, "baseline422.jpg")
    add_processor("llava_next", dict(nxt, image_grid_pinpoints=[[32, 64], [64, 32], [48, 48]]),
                  "lossless.webp", tag="_b")
    add_processor("llava_next", dict(nxt, image_grid_pinpoints=[[16, 48], [32, 48]]), "rgb.png",
                  tag="_c")
    FILES["manifest.json"] = json.dumps(MANIFEST, indent=1).encode()
    total = sum(len(b) for b in FILES.values())
    print("files", len(FILES), "bytes", total, "pil", PIL.__version__, "transformers",
          transformers.__version__)
    with tarfile.open(os.path.join(out_dir, "fixtures.tar.gz"), "w:gz") as tar:
        for name, b in sorted(FILES.items()):
            ti = tarfile.TarInfo(name)
            ti.size = len(b)
            ti.mtime = 0
            tar.addfile(ti, io.BytesIO(b))


if __name__ == "__main__":
    main()
