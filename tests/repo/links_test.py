#!/usr/bin/env python3
"""Relative links in the repository's Markdown files against its files.

Fails when a Markdown link ([text](target), ![alt](target) or a reference
definition "[label]: target") in any tracked .md file (README.md, docs/,
models/, train/, ...) points at a path the repository does not contain: not a tracked file (git
ls-files), nor a directory holding one.  Links with a scheme (https:,
mailto:) and pure #anchors are not checked; the #fragment of a file link is
ignored.  Text inside code (fenced blocks, `inline`) is not a link.
Usage: links_test.py <repository root>
"""
import pathlib
import re
import subprocess
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()

try:
    listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True,
                            capture_output=True).stdout.decode().split("\0")
    files = {f for f in listed if f}
except (OSError, subprocess.CalledProcessError):
    # Not a git checkout (a source tarball): what is on disk is the repository.
    files = {str(p.relative_to(root)) for p in root.rglob("*")
             if p.is_file() and ".git" not in p.relative_to(root).parts}
dirs = set()
for f in files:
    parts = f.split("/")
    for i in range(1, len(parts)):
        dirs.add("/".join(parts[:i]))

INLINE = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"`+[^`]*`+")

docs = [root / f for f in sorted(files) if f.endswith(".md")]
errors = []
checked = 0
for doc in docs:
    if not doc.exists():
        continue
    rel_doc = doc.relative_to(root)
    in_fence = False
    for lineno, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        text = CODE_SPAN.sub("", line)
        targets = [m.group(1) for m in INLINE.finditer(text)]
        ref = REFERENCE.match(text)
        if ref:
            targets.append(ref.group(1))
        for target in targets:
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0].split("?", 1)[0]
            if not path:
                continue
            resolved = (doc.parent / path).resolve()
            checked += 1
            try:
                key = str(resolved.relative_to(root))
            except ValueError:
                errors.append(f"{rel_doc}:{lineno}: {target} points outside the repository")
                continue
            if key not in files and key not in dirs and key != ".":
                errors.append(f"{rel_doc}:{lineno}: {target} -> {key} is not in the repository")

for e in errors:
    print(e)
print(f"links_test: {checked} relative links in {len(docs)} files, {len(errors)} broken")
sys.exit(1 if errors else 0)
