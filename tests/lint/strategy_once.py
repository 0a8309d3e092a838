#!/usr/bin/env python3
"""The ZeRO stage is asked of sharding::Strategy only: outside the sharding and config modules no
code (strings and comments aside) names `zero_stage`. Usage: strategy_once.py REPO_ROOT. Exit 0:
none does; 1: each reference on a line."""
import os
import re
import sys

ALLOWED = ("src/sharding/", "include/hpctrain/sharding/", "src/config/", "include/hpctrain/config/")


def code_of(text):
    """`text` with string and character literals and comments blanked out, lines kept."""
    pattern = r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\''
    return re.sub(pattern, lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def main(root):
    found = []
    for top in ("src", "include"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for file in sorted(files):
                path = os.path.relpath(os.path.join(dirpath, file), root)
                if not file.endswith((".cpp", ".h")) or path.startswith(ALLOWED):
                    continue
                code = code_of(open(os.path.join(root, path), errors="replace").read())
                for number, line in enumerate(code.splitlines(), 1):
                    if re.search(r"\bzero_stage\b", line):
                        found.append(f"{path}:{number}: reads the ZeRO stage; ask sharding::Strategy instead")
    for line in found:
        print(line)
    if not found:
        print("the ZeRO stage is read only by sharding::Strategy and the config module")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
