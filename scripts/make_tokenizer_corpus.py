#!/usr/bin/env python3
"""Builds tests/tokenizer/data/multilingual_corpus.jsonl, the text of the tokenizer
differential test: translated messages from the gettext catalogs (.mo files) that
Debian packages install under /usr/share/locale (many languages and scripts), plus
seeded synthetic lines mixing scripts, digits, emoji, code and whitespace runs.
The committed file is the output; rerunning on another machine may pick other
catalogs, which is fine (the expected ids are computed at test time).

Usage: scripts/make_tokenizer_corpus.py [OUT] [--max-bytes N]
"""
import json
import os
import random
import struct
import sys

LANGS = ["ar", "bg", "bn", "cs", "da", "de", "el", "es", "et", "fa", "fi", "fr", "he", "hi",
         "hu", "id", "it", "ja", "ka", "kk", "ko", "lt", "nl", "pl", "pt_BR", "ro", "ru", "sk",
         "sr", "sv", "ta", "th", "tr", "uk", "vi", "zh_CN", "zh_TW", "am", "hy", "ml", "my"]


def read_mo(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 28:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic == 0x950412DE else ">" if magic == 0xDE120495 else None
    if endian is None:
        return []
    _, n, _, trans_off = struct.unpack(endian + "4I", data[4:20])
    out = []
    for i in range(n):
        length, off = struct.unpack(endian + "2I", data[trans_off + 8 * i: trans_off + 8 * i + 8])
        raw = data[off: off + length]
        for part in raw.split(b"\0"):
            try:
                s = part.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if 8 <= len(s) <= 400 and not s.startswith("Project-Id-Version"):
                out.append(s)
    return out


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else \
        os.path.join(os.path.dirname(__file__), "..", "tests", "tokenizer", "data",
                     "multilingual_corpus.jsonl")
    max_bytes = 900_000
    if "--max-bytes" in sys.argv:
        max_bytes = int(sys.argv[sys.argv.index("--max-bytes") + 1])
    rng = random.Random(20261129)
    per_lang = {}
    for lang in LANGS:
        d = os.path.join("/usr/share/locale", lang, "LC_MESSAGES")
        if not os.path.isdir(d):
            continue
        texts = set()
        for name in sorted(os.listdir(d)):
            if name.endswith(".mo"):
                texts.update(read_mo(os.path.join(d, name)))
        if texts:
            per_lang[lang] = sorted(texts)
    lines = []
    budget = int(max_bytes * 0.8) // max(1, len(per_lang))
    for lang, texts in sorted(per_lang.items()):
        rng.shuffle(texts)
        used = 0
        for t in texts:
            if used > budget:
                break
            lines.append({"lang": lang, "text": t})
            used += len(t.encode("utf-8"))
    # Synthetic lines: script mixing, numbers, emoji sequences, code, whitespace runs.
    pool = [l["text"] for l in lines]
    extras = ["😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "∑", "∫x²dx", "ﬁ", "Å", "é", "\u0301", "\u200d", "\u00a0",
              "\u3000", "\t", "\n", "\r\n", "  ", "    ", "1234567", "3.14159", "-42", "0x1F",
              "don't", "I'LL", "WE'RE", "it's", "<|im_start|>", "<s>", "</s>", "<bos>",
              "def f(x):\n    return x ** 2", "if (a && b) { c++; }", "https://example.org/a?b=c"]
    size = sum(len(l["text"].encode("utf-8")) for l in lines)
    while size < max_bytes:
        parts = [rng.choice(pool)[: rng.randint(1, 60)] if rng.random() < 0.6 else rng.choice(extras)
                 for _ in range(rng.randint(2, 8))]
        text = "".join(p + rng.choice(["", " ", "  ", "\n", " \t "]) for p in parts)
        lines.append({"lang": "mix", "text": text})
        size += len(text.encode("utf-8"))
    with open(out_path, "w", encoding="utf-8") as f:
        for l in lines:
            f.write(json.dumps(l, ensure_ascii=False) + "\n")
    print(f"{out_path}: {len(lines)} lines, {size} bytes of text", file=sys.stderr)


if __name__ == "__main__":
    main()
