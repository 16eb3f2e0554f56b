#!/usr/bin/env python3
"""The layer list in docs/architecture.md against the build and the sources.

Fails when
  - a directory under src/ is not a layer (no dsv4_layer(NAME <dir>) in its CMakeLists.txt),
  - a layer is missing from the documented list, or the list names one that does not exist,
  - a layer's documented `->` dependencies differ from the DEPS its CMakeLists.txt declares,
  - a source file includes a header of a layer that its own layer does not declare directly
    (the build only catches layers that are not reachable at all, since include roots follow
    the link graph transitively),
  - a header under src/M/ opens a namespace other than dsv4::M (or one nested in it); base/
    and tensor/ are the shared vocabulary and stay in dsv4.
Usage: layers_test.py <repository root>
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
errors = []

# Declared layers and their direct DEPS.
declared = {}
for cml in sorted((root / "src").glob("*/CMakeLists.txt")):
    text = " ".join(cml.read_text().split())
    m = re.search(r"dsv4_layer\(NAME (\w+)(.*?)\)", text)
    if not m or m.group(1) != cml.parent.name:
        errors.append(f"src/{cml.parent.name}: no dsv4_layer(NAME {cml.parent.name} ...)")
        continue
    deps = re.search(r"DEPS ([\w ]+?)(?: LIBS| SOURCES|$)", m.group(2) + " ")
    declared[m.group(1)] = set(deps.group(1).split()) if deps else set()
for d in sorted((root / "src").iterdir()):
    if d.is_dir() and not (d / "CMakeLists.txt").exists():
        errors.append(f"src/{d.name}: a directory under src/ without a layer CMakeLists.txt")

# The documented list: the first fenced block after "## Layers".
doc = (root / "docs/architecture.md").read_text()
block = doc[doc.index("## Layers"):]
block = block[block.index("```") + 3:]
block = block[:block.index("```")]
documented = {}
current = None
for line in block.splitlines():
    m = re.match(r"^([a-z_]+)/\s", line)
    if m:
        current = m.group(1)
        documented[current] = None
        continue
    m = re.match(r"^\s+-> (.*)$", line)
    if m and current is not None:
        names = m.group(1).strip()
        documented[current] = set() if names == "(nothing)" else {
            n.strip() for n in names.split(",")}
documented.pop("apps", None)

for name in sorted(set(declared) - set(documented)):
    errors.append(f"layer {name} is not in docs/architecture.md's layer list")
for name in sorted(set(documented) - set(declared)):
    errors.append(f"docs/architecture.md lists {name}/, which is not a layer")
for name in sorted(set(declared) & set(documented)):
    if documented[name] != declared[name]:
        errors.append(f"layer {name}: docs say -> {sorted(documented[name] or [])}, "
                      f"CMakeLists.txt declares {sorted(declared[name])}")

# Direct includes only from the layer itself or its declared dependencies.
include = re.compile(r'^\s*#\s*include\s+"(\w+)/')
for name, deps in sorted(declared.items()):
    for f in sorted((root / "src" / name).rglob("*")):
        if f.suffix not in (".h", ".cc"):
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = include.match(line)
            if m and m.group(1) in declared and m.group(1) != name and m.group(1) not in deps:
                errors.append(f"{f.relative_to(root)}:{n}: includes {m.group(1)}/, "
                              f"which layer {name} does not declare")

# Namespaces follow the layers.
vocabulary = {"base", "tensor"}
opens = re.compile(r"^namespace (dsv4[\w:]*) \{")
for name in sorted(declared):
    want = "dsv4" if name in vocabulary else f"dsv4::{name}"
    for f in sorted((root / "src" / name).rglob("*.h")):
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            m = opens.match(line)
            if m and m.group(1) != want and not m.group(1).startswith(want + "::"):
                errors.append(f"{f.relative_to(root)}:{n}: opens namespace {m.group(1)}, "
                              f"layer {name} lives in {want}")

for e in errors:
    print(e)
print(f"{len(declared)} layers, {len(errors)} problem(s)")
sys.exit(1 if errors else 0)
