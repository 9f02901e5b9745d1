#!/usr/bin/env python3
"""Conformance fixture weights from their manifests (numpy only).

Each folder under tests/conformance/fixtures holds a `weights.json` manifest instead of
its weight files (format: tests/conformance/fixtures/README.md). The weights are
seeded normal draws reproduced bit for bit from PyTorch's CPU generator (MT19937, a
53-bit double uniform from two 32-bit outputs, Box-Muller over groups of 16), so the
files this writes are the ones the references were computed on. The C++ materialiser
(src/model/fixture_weights.cc) implements the same recipe; the tests compare the two.

  scripts/fixture_weights.py NAME... --out DIR   write each fixture's files to DIR/NAME
  scripts/fixture_weights.py --check [NAME...]   regenerate and compare with the checksums
                                                 recorded in the manifests (all by default,
                                                 the quantized ones as quant/NAME, the
                                                 LoRA adapters as lora/NAME, the LLaVA
                                                 ones as vision/NAME)

The functions here also build manifests (make_fixtures.py and
make_remote_code_fixtures.py call them when they make a fixture).
"""
import argparse
import base64
import json
import math
import os
import struct
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
FIXTURES = os.path.join(ROOT, "tests", "conformance", "fixtures")
MANIFEST = "weights.json"
FORMAT = 1


# ---- the generator -------------------------------------------------------------------

class Stream:
    """torch.Generator().manual_seed(seed) on the CPU, `skip` 32-bit outputs on."""

    def __init__(self, seed, skip=0):
        self.bg = np.random.MT19937()
        self.bg._legacy_seeding(seed)  # the reference MT19937 init_genrand(seed)
        if skip:
            self.bg.random_raw(skip)

    def uniform(self, n):
        r = self.bg.random_raw(2 * n).astype(np.uint64)
        v = (r[0::2] << np.uint64(32)) | r[1::2]
        return (v & np.uint64((1 << 53) - 1)).astype(np.float64) * (1.0 / (1 << 53))

    def normal(self, n):
        """torch.randn(n, dtype=torch.float64, generator=g) for n >= 16."""
        if n < 16:
            raise ValueError("a stream draws at least 16 values at a time, not %d" % n)
        d = self.uniform(n)
        full = n - n % 16
        box_muller16(d[:full].reshape(-1, 16))
        if n % 16:
            d[n - 16:] = self.uniform(16)
            box_muller16(d[n - 16:].reshape(1, 16))
        return d


def _libm(f, x):
    # The C library's log / cos / sin (as torch and the C++ materialiser call them):
    # numpy's own vectorised versions may differ in the last bit on some builds.
    return np.fromiter(map(f, x.ravel()), dtype=np.float64, count=x.size).reshape(x.shape)


def box_muller16(g):
    u1 = 1.0 - g[:, :8]
    u2 = g[:, 8:].copy()
    r = np.sqrt(-2.0 * _libm(math.log, u1))
    t = 2.0 * math.pi * u2
    g[:, :8] = r * _libm(math.cos, t)
    g[:, 8:] = r * _libm(math.sin, t)


def value(kind, std, z):
    """A fixture tensor's float32 values from the normal draws z (float64)."""
    if kind == "scaled":
        return z.astype(np.float32) * np.float32(std)
    if kind == "scaled64":
        return (z * std).astype(np.float32)
    if kind == "norm":
        return (1.0 + 0.1 * z).astype(np.float32)
    raise ValueError("unknown kind %r" % kind)


def to_bf16_bits(x):
    b = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return b.astype(np.uint16)


DTYPES = {"F32": 4, "BF16": 2, "F16": 2}
# The payloads of quantized checkpoints: inline bytes only, never stream rows.
INLINE_DTYPES = {"I64": 8, "I32": 4, "I8": 1, "U8": 1, "F8_E4M3": 1}
SIZES = dict(DTYPES, **INLINE_DTYPES)


def cast_bytes(x, dtype):
    if dtype == "F32":
        return np.ascontiguousarray(x, dtype=np.float32).tobytes()
    if dtype == "BF16":
        return to_bf16_bits(x).tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(x, dtype=np.float32).astype(np.float16).tobytes()
    raise ValueError("unknown dtype %r" % dtype)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    # Eight interleaved lanes would change the value; keep the byte-serial definition,
    # in chunks through numpy-free Python (fixtures are under 2 MB).
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


# ---- manifests -> files --------------------------------------------------------------

def generate(manifest):
    """name -> float32 array (flat) of every stream tensor, plus shapes."""
    out, shapes = {}, {}
    for s in manifest["streams"]:
        st = Stream(s["seed"], s["skip"])
        for t in s["tensors"]:
            n = math.prod(t["shape"])
            out[t["name"]] = value(t["kind"], t.get("std"), st.normal(n))
            shapes[t["name"]] = t["shape"]
    return out, shapes


def tensor_bytes(t, gen, shapes):
    if "base64" in t:
        return base64.b64decode(t["base64"], validate=True)
    if t["dtype"] not in DTYPES:
        raise ValueError("%s: %s tensors carry inline bytes, not stream rows" % (t["name"], t["dtype"]))
    segs = t.get("rows", [[t["name"], 0, None]])
    parts = []
    for src, first, count in segs:
        shape = shapes[src]
        row = math.prod(shape[1:]) if len(shape) > 1 else 1
        count = shape[0] if count is None else count
        parts.append(gen[src][first * row:(first + count) * row])
    return cast_bytes(np.concatenate(parts), t["dtype"])


def safetensors_bytes(entries, metadata):
    """entries: (name, dtype, shape, data). The layout of tachyon's write_safetensors
    (and of the reference implementation): keys sorted, each entry's fields as dtype,
    shape, data_offsets, data by decreasing element size then name, header padded to 8."""
    order = sorted(entries, key=lambda e: (-SIZES[e[1]], e[0]))
    header, off = {}, 0
    for name, dtype, shape, data in order:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    header = dict(sorted(header.items()))  # the entries keep dtype, shape, data_offsets
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text.encode() + b"".join(e[3] for e in order)


def materialise(manifest):
    """file name -> bytes, the checkpoint files the manifest describes."""
    gen, shapes = generate(manifest)
    files, weight_map, total = {}, {}, 0
    for f in manifest["files"]:
        entries = []
        for t in f["tensors"]:
            data = tensor_bytes(t, gen, shapes)
            if len(data) != math.prod(t["shape"]) * SIZES[t["dtype"]]:
                raise ValueError("%s: %d bytes for shape %s" % (t["name"], len(data), t["shape"]))
            entries.append((t["name"], t["dtype"], t["shape"], data))
            weight_map[t["name"]] = f["name"]
            total += len(data)
        files[f["name"]] = safetensors_bytes(entries, f.get("metadata"))
    if "index" in manifest:
        ix = manifest["index"]
        body = {"metadata": ix.get("metadata", {}), "weight_map": weight_map}
        files[ix["name"]] = (json.dumps(body, indent=2, sort_keys=True) + "\n").encode()
    return files


def checksums(files):
    return {k: fnv1a64(v) for k, v in sorted(files.items())}


def dump_manifest(m):
    """Compact JSON, one stream tensor or file tensor a line."""
    def j(x):
        return json.dumps(x, separators=(",", ":"))
    lines = ["{"]
    top = []
    for k in ("format", "references", "index", "fnv1a64"):
        if k in m:
            top.append('"%s":%s' % (k, j(m[k])))
    streams = []
    for s in m["streams"]:
        ts = ",\n  ".join(j(t) for t in s["tensors"])
        streams.append('{"seed":%d,"skip":%d,"tensors":[\n  %s]}' % (s["seed"], s["skip"], ts))
    top.append('"streams":[' + ",\n".join(streams) + "]")
    files = []
    for f in m["files"]:
        ts = ",\n  ".join(j(t) for t in f["tensors"])
        head = '{"name":%s' % j(f["name"])
        if "metadata" in f:
            head += ',"metadata":%s' % j(f["metadata"])
        files.append(head + ',"tensors":[\n  %s]}' % ts)
    top.append('"files":[' + ",\n".join(files) + "]")
    return "{" + ",\n".join(top) + "}\n"


def load_manifest(name):
    with open(os.path.join(FIXTURES, name, MANIFEST)) as f:
        return json.load(f)


def finish_manifest(m):
    """The manifest with the checksums of the files it builds recorded."""
    m = dict(m)
    m["fnv1a64"] = checksums(materialise(m))
    return m


def write_manifest(folder, m):
    m = finish_manifest(m)
    with open(os.path.join(folder, MANIFEST), "w") as f:
        f.write(dump_manifest(m))
    return m


def stream_manifest(stream, tensors, metadata=None):
    """A manifest writing every tensor of one stream whole, in a single model.safetensors
    (tensors: name -> (dtype, shape))."""
    f = {"name": "model.safetensors"}
    if metadata:
        f["metadata"] = metadata
    f["tensors"] = [{"name": k, "dtype": tensors[k][0], "shape": list(tensors[k][1])}
                    for k in sorted(tensors)]
    return {"format": FORMAT, "streams": [stream], "files": [f]}


# ---- building manifests (used by the fixture makers) ----------------------------------

def gather_segments(target, dtype, width, gen, shapes):
    """Segments [src, first, count] of stream tensor rows that, concatenated and cast to
    `dtype`, give `target` (bytes of rows `width` elements wide), or None."""
    es = DTYPES[dtype]
    rb = width * es
    index, rows = {}, {}
    for src in sorted(gen):
        shape = shapes[src]
        w = math.prod(shape[1:]) if len(shape) > 1 else 1
        if w != width:
            continue
        data = cast_bytes(gen[src], dtype)
        rows[src] = data
        for i in range(shape[0]):
            index.setdefault(data[i * rb:(i + 1) * rb], []).append((src, i))
    n = len(target) // rb
    segs, p = [], 0
    while p < n:
        best = None
        for src, i in index.get(target[p * rb:(p + 1) * rb], ()):
            data, k = rows[src], 1
            limit = min(n - p, shapes[src][0] - i)
            while k < limit and data[(i + k) * rb:(i + k + 1) * rb] == target[(p + k) * rb:(p + k + 1) * rb]:
                k += 1
            if best is None or k > best[2]:
                best = [src, i, k]
        if best is None:
            return None
        segs.append(best)
        p += best[2]
    return segs


def twin_manifest(source, tensors, metadata=None, references=None):
    """A manifest for a checkpoint (name -> (dtype, shape, bytes)) made from the stream
    tensors of the `source` manifest: each tensor a gather of rows where it is one,
    its bytes inline otherwise (small computed buffers, the odd extra random tensor)."""
    gen, shapes = generate(source)
    out = []
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        width = math.prod(shape[1:]) if len(shape) > 1 else 1
        segs = gather_segments(data, dtype, width, gen, shapes) if dtype in DTYPES else None
        t = {"name": name, "dtype": dtype, "shape": list(shape)}
        if segs is None:
            if len(data) > 4096:
                raise ValueError("%s (%d bytes) is not a gather of the source's rows" % (name, len(data)))
            t["base64"] = base64.b64encode(data).decode("ascii")
        elif not (len(segs) == 1 and segs[0][0] == name and segs[0][1] == 0
                  and segs[0][2] == shapes[name][0]):
            t["rows"] = segs
        out.append(t)
    m = {"format": FORMAT}
    if references:
        m["references"] = references
    m["streams"] = source["streams"]
    f = {"name": "model.safetensors"}
    if metadata:
        f["metadata"] = metadata
    f["tensors"] = out
    m["files"] = [f]
    return m


def all_names():
    """Every fixture with a manifest: the folders of FIXTURES and of its quant/ group."""
    names = []
    for group in ("", "quant", "lora", "vision"):
        root = os.path.join(FIXTURES, group)
        if os.path.isdir(root):
            names += sorted(os.path.join(group, d) if group else d for d in os.listdir(root)
                            if os.path.exists(os.path.join(root, d, MANIFEST)))
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--out", help="write the files of each named fixture to OUT/NAME")
    ap.add_argument("--check", action="store_true",
                    help="regenerate and compare with the manifests' checksums")
    args = ap.parse_args()
    names = args.names or all_names()
    bad = 0
    for name in names:
        m = load_manifest(name)
        files = materialise(m)
        if args.out:
            d = os.path.join(args.out, name)
            os.makedirs(d, exist_ok=True)
            for k, v in files.items():
                with open(os.path.join(d, k), "wb") as f:
                    f.write(v)
        if args.check:
            got = checksums(files)
            ok = got == m["fnv1a64"]
            bad += not ok
            print("%-24s %s" % (name, "ok" if ok else "MISMATCH %s != %s" % (got, m["fnv1a64"])))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
