#!/usr/bin/env python3
"""Regenerates tests/chat/templates/expected.json: every template in
tests/chat/templates/*.jinja applied to every conversation in conversations.json by
jinja2 in transformers' chat-template environment (see jinja_reference.py), with the
variables apply_chat_template passes and strftime_now fixed at 2024-07-26 12:00.

Usage: scripts/chat_template_reference.py tests/chat/templates
"""
import datetime
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jinja_reference import make_env  # noqa: E402

TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}


def main():
    root = sys.argv[1]
    env = make_env()
    env.globals["strftime_now"] = lambda fmt: datetime.datetime(2024, 7, 26, 12, 0, 0).strftime(fmt)
    with open(os.path.join(root, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    out = []
    for path in sorted(glob.glob(os.path.join(root, "*.jinja"))):
        with open(path, encoding="utf-8") as f:
            template = env.from_string(f.read())
        for conv in conversations:
            rec = {"template": os.path.basename(path), "conversation": conv["name"]}
            try:
                rec["rendered"] = template.render(messages=conv["messages"], tools=conv.get("tools"),
                                                  documents=None,
                                                  add_generation_prompt=conv["add_generation_prompt"],
                                                  **TOKENS)
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {e}"
            out.append(rec)
    with open(os.path.join(root, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(out)} renders, {sum('error' in r for r in out)} errors")


if __name__ == "__main__":
    main()
