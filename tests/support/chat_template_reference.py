#!/usr/bin/python3
"""Renders chat templates with Jinja2 as transformers' apply_chat_template sets it up: an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop controls, tojson as
json.dumps(ensure_ascii=False), and raise_exception; the special tokens of tokenizer_config.json
passed as variables unless a line sets them. Prints one JSON line per conversation, as
`hpctrain tokenize --conversations` does: {"text": ...} or {"error": ..., "raised": true|false}.

usage: chat_template_reference.py MODEL_DIR [--template FILE] CONVERSATIONS_JSONL
"""
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


class Generation(Extension):
    """transformers' {% generation %} tag: its body is rendered as it is."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.If(nodes.Const(True), body, [], [], lineno=lineno)


class Raised(Exception):
    pass


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    args = sys.argv[1:]
    directory, conversations = args[0], args[-1]
    with open(os.path.join(directory, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    source = config.get("chat_template")
    if "--template" in args:
        with open(args[args.index("--template") + 1], encoding="utf-8") as f:
            source = f.read()
    tokens = {}
    for key in SPECIAL:
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            tokens[key] = value
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(source)
    with open(conversations, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            variables = dict(tokens)
            variables.update(json.loads(line))
            try:
                out = {"text": template.render(**variables)}
            except Raised as e:
                out = {"error": str(e), "raised": True}
            except (jinja2.TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError,
                    ZeroDivisionError, OverflowError) as e:
                out = {"error": str(e), "raised": False}
            print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()
