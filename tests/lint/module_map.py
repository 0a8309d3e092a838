#!/usr/bin/env python3
"""Checks docs/architecture.md's module map against src/CMakeLists.txt: the same modules, each
listing exactly the hpctrain modules its target links (PUBLIC or PRIVATE), each of them in a
lower layer; and that a module's sources and headers include only its own headers and those of
the modules it links, directly or through them (static libraries would link an upward include
anyway, in the one executable). Usage: module_map.py REPO_ROOT. Exit 0: they agree; 1: each
difference on a line."""
import os
import re
import sys

# Targets that are build settings or wrap a third-party library, not modules.
NOT_MODULES = {"options", "warnings", "torch", "torch_pch", "mpi", "hdf5", "nccl", "tfevents_proto", "pcre2", "utf8proc"}


def cmake_calls(text, command):
    """Each `command(...)` call's arguments, comments dropped, parentheses matched."""
    text = re.sub(r"#[^\n]*", "", text)
    for match in re.finditer(r"\b" + command + r"\s*\(", text):
        depth, i = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield text[match.end():i - 1].split()


def linked_modules(cmake_text):
    links = {}
    for args in cmake_calls(cmake_text, "hpctrain_module"):
        links[args[0]] = set()
        section = None
        for word in args[1:]:
            if word in ("SOURCES", "PUBLIC", "PRIVATE"):
                section = word
            elif section != "SOURCES" and word.startswith("hpctrain_"):
                links[args[0]].add(word[len("hpctrain_"):])
    for args in cmake_calls(cmake_text, "target_link_libraries"):
        target = args[0][len("hpctrain_"):] if args[0].startswith("hpctrain_") else None
        if target in links:
            links[target] |= {w[len("hpctrain_"):] for w in args[1:] if w.startswith("hpctrain_")}
    return {m: deps - NOT_MODULES for m, deps in links.items()}


def module_map(doc_text):
    section = doc_text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].isdigit():
            continue
        name = re.match(r"`([a-z_]+)/`", cells[1]).group(1)
        deps = set() if cells[3] == "-" else {d.strip() for d in cells[3].split(",")}
        rows[name] = (int(cells[0]), deps)
    return rows


def reachable(links, name):
    """The modules `name` links, directly or through the modules it links."""
    seen, todo = set(), list(links.get(name, ()))
    while todo:
        dep = todo.pop()
        if dep not in seen:
            seen.add(dep)
            todo.extend(links.get(dep, ()))
    return seen


def include_problems(root, links):
    """Each include of another module's header that `name`'s link line does not reach."""
    problems = []
    for name in sorted(links):
        allowed = reachable(links, name) | {name}
        for folder in (f"{root}/src/{name}", f"{root}/include/hpctrain/{name}"):
            for dirpath, _, files in os.walk(folder):
                for file in sorted(files):
                    path = os.path.join(dirpath, file)
                    for number, line in enumerate(open(path, errors="replace"), 1):
                        match = re.match(r'\s*#\s*include\s*"hpctrain/([a-z_]+)/', line)
                        if match and match.group(1) not in allowed:
                            problems.append(f"{os.path.relpath(path, root)}:{number}: includes a header of "
                                            f"{match.group(1)}, which module {name} does not link")
    return problems


def main(root):
    links = linked_modules(open(f"{root}/src/CMakeLists.txt").read())
    rows = module_map(open(f"{root}/docs/architecture.md").read())
    problems = []
    for name in sorted(set(links) | set(rows)):
        if name not in rows:
            problems.append(f"module {name} is in src/CMakeLists.txt but not in the map")
        elif name not in links:
            problems.append(f"module {name} is in the map but src/CMakeLists.txt has no hpctrain_{name}")
        elif rows[name][1] != links[name]:
            problems.append(f"module {name}: the map says it links {sorted(rows[name][1])}, "
                            f"src/CMakeLists.txt {sorted(links[name])}")
    for name, (layer, deps) in rows.items():
        for dep in deps:
            if dep in rows and rows[dep][0] >= layer:
                problems.append(f"module {name} (layer {layer}) links {dep} of layer {rows[dep][0]}: not below it")
    for problem in problems:
        print(f"docs/architecture.md: {problem}")
    includes = include_problems(root, links)
    for problem in includes:
        print(problem)
    problems += includes
    if not problems:
        print(f"module map: {len(rows)} modules, their links as src/CMakeLists.txt has them, every include "
              "within them")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
