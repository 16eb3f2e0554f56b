#!/usr/bin/env python3
"""Checks that no AVX-512 code can run on an AVX2-only CPU (docs/kernels.md
"Checking that AVX-512 stays in its objects").

The binary is built for x86-64-v3; only the objects named with --avx512 are
compiled with AVX-512 flags and must be reached through the ISA dispatch.  An
AVX-512 instruction is recognised by its encoding: in 64-bit mode every EVEX
instruction (all zmm, opmask and xmm16-31 uses, and the EVEX-only forms on
xmm/ymm) starts with the byte 0x62 after any segment or address-size prefix,
a byte that has no other meaning there.

Rules, each of which fails the check:
  1. an object of the archive(s) that is not an AVX-512 object contains an
     EVEX instruction (code compiled or forced to AVX-512 outside them);
  2. an AVX-512 object defines a weak (COMDAT) function containing one: the
     linker keeps one copy of an inline function or template for the whole
     program and may pick this one for AVX2 callers;
  3. (with --binary) a linked program contains an EVEX instruction in a
     function that no AVX-512 object defines (the effect of either cause).

Usage: check_isa_leak.py --objdump OBJDUMP --nm NM --avx512 a.cc.o,b.cc.o
                         LIB.a... [--binary EXE]...
"""
import argparse
import collections
import os
import subprocess
import sys

PREFIXES = {0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x67}


def is_evex(hex_bytes):
    for tok in hex_bytes:
        b = int(tok, 16)
        if b in PREFIXES:
            continue
        return b == 0x62
    return False


def disassemble(objdump, path):
    """Yields (object member or None, function symbol, has_evex, first EVEX line)."""
    out = subprocess.run([objdump, "-d", "--insn-width=15", path], check=True,
                         capture_output=True, text=True).stdout
    member, sym, evex, first = None, None, False, ""
    for line in out.splitlines():
        if line.endswith("file format elf64-x86-64"):
            if sym is not None:
                yield member, sym, evex, first
            member, sym, evex, first = line.split(":")[0].strip(), None, False, ""
            continue
        if line.endswith(">:") and " <" in line:
            if sym is not None:
                yield member, sym, evex, first
            sym, evex, first = line[line.index("<") + 1:-2], False, ""
            continue
        parts = line.split("\t")
        if sym is None or len(parts) < 3 or not parts[0].strip().endswith(":"):
            continue
        if not evex and is_evex(parts[1].split()):
            evex, first = True, parts[2].strip()
    if sym is not None:
        yield member, sym, evex, first


def symbols(nm, path):
    """{object member: {symbol: type letter}} of defined symbols."""
    out = subprocess.run([nm, "--defined-only", path], check=True, capture_output=True,
                         text=True).stdout
    table = collections.defaultdict(dict)
    member = None
    for line in out.splitlines():
        if line.endswith(":"):
            member = line[:-1]
            continue
        parts = line.split()
        if len(parts) == 3:
            table[member][parts[2]] = parts[1]
    return table


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objdump", default="objdump")
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--avx512", default="", help="comma-separated AVX-512 object names")
    ap.add_argument("--binary", action="append", default=[])
    ap.add_argument("archives", nargs="+")
    args = ap.parse_args()
    avx512 = {n for n in args.avx512.split(",") if n}
    errors = []
    avx512_functions = set()
    evex_in_avx512 = 0
    missing_files = [p for p in args.archives + args.binary if not os.path.exists(p)]
    if missing_files:
        for p in missing_files:
            print(f"ISA leak check: {p} does not exist (build the target kernel_isa_leak_inputs)")
        return 1
    for archive in args.archives:
        syms = symbols(args.nm, archive)
        for member, sym, evex, first in disassemble(args.objdump, archive):
            if member in avx512:
                avx512_functions.add(sym)
                evex_in_avx512 += evex
                if evex and syms[member].get(sym, "") in ("W", "V", "u"):
                    errors.append(f"{archive}({member}): weak function {sym} has AVX-512 code "
                                  f"({first}); another object's callers may link to it")
            elif evex:
                errors.append(f"{archive}({member}): {sym} has AVX-512 code ({first}) but "
                              "the object is not compiled for AVX-512")
    missing = avx512 - {m for a in args.archives for m in symbols(args.nm, a)}
    for name in sorted(missing):
        errors.append(f"AVX-512 object {name} is in no archive (renamed? update the list)")
    for binary in args.binary:
        for _, sym, evex, first in disassemble(args.objdump, binary):
            if evex and sym not in avx512_functions:
                errors.append(f"{binary}: {sym} has AVX-512 code ({first}) and is not defined "
                              "by an AVX-512 object")
    for e in errors:
        print("ISA leak:", e)
    print(f"checked {len(args.archives)} archive(s), {len(args.binary)} binary(ies); "
          f"{len(avx512)} AVX-512 objects, {evex_in_avx512} of their functions use AVX-512")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
