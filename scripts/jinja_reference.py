#!/usr/bin/env python3
"""Regenerates tests/chat/data/jinja_cases.json: each case's template rendered by jinja2
in the environment transformers builds for chat templates (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols; its tojson, raise_exception and strftime_now).
The C++ interpreter must reproduce every output byte for byte, and fail where jinja2
fails. Needs python3 with jinja2 >= 3.1 (Debian: python3-jinja2).

Usage: scripts/jinja_reference.py tests/chat/data/jinja_cases_src.json tests/chat/data/jinja_cases.json
"""
import datetime
import json
import sys

import jinja2
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(Extension):
    # transformers' {% generation %} tag without its index tracking: renders its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        cases = json.load(f)
    env = make_env()
    out = []
    for case in cases:
        rec = dict(case)
        try:
            rec["expected"] = env.from_string(case["template"]).render(**case.get("vars", {}))
        except Exception as e:  # the C++ side must fail too
            rec["error"] = f"{type(e).__name__}: {e}"
        out.append(rec)
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(out)} cases, {sum('error' in c for c in out)} errors")


if __name__ == "__main__":
    main()
