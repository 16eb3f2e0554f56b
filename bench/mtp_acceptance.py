#!/usr/bin/env python3
"""MTP draft acceptance per draft position on real prompts, through `dsv4 serve`.

For each K in --ks a server runs the model with MTP K; held-out chat conversations (their
final assistant turn removed) and held-out prose openings are sent one at a time (batch 1),
greedy and sampled (temperature 0.7, seeded: coupled drafts), and the server's
vllm:spec_decode_* counters give drafts and accepted tokens per draft position.

    /usr/bin/python3 bench/mtp_acceptance.py --dsv4 build/release/apps/dsv4/dsv4 \
        --chats train/data/out/jsonl/chat_val.jsonl --prose train/data/out/val_prose.txt
"""
import argparse, json, re, subprocess, sys, time, urllib.error, urllib.request


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def metrics(base):
    text = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
    out = {"drafts": 0.0, "pos": {}}
    for line in text.splitlines():
        if line.startswith("vllm:spec_decode_num_drafts_total"):
            out["drafts"] = float(line.split()[-1])
        m = re.match(r'vllm:spec_decode_num_accepted_tokens_per_pos_total\{.*position="(\d+)"\} (\S+)', line)
        if m:
            out["pos"][int(m.group(1))] = float(m.group(2))
    return out


def start(dsv4, k, threads):
    args = [dsv4, "serve", "--port", "0", "--threads", str(threads), "--max-num-seqs", "4",
            "--kv-cache-memory", "256M", "--max-model-len", "2048"]
    if k:
        args += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": k})]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    buf = ""
    while True:
        line = p.stdout.readline()
        if not line:
            raise SystemExit("server exited: " + buf)
        buf += line
        m = re.search(r"Listening on (http://[\d.]+:\d+)", buf)
        if m and "startup complete" in buf:
            return p, m.group(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsv4", required=True)
    ap.add_argument("--chats", required=True)
    ap.add_argument("--prose", required=True)
    ap.add_argument("--ks", default="1,2,3")
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    chats = []
    with open(a.chats, encoding="utf-8") as f:
        for line in f:
            c = json.loads(line)
            msgs = c["messages"]
            if msgs[-1]["role"] == "assistant":
                chats.append({"messages": msgs[:-1], "tools": c.get("tools"),
                              "chat_template_kwargs": {"thinking": bool(c.get("thinking"))}})
            if len(chats) >= a.n:
                break
    paras = [p.strip() for p in open(a.prose, encoding="utf-8").read().split("\n\n") if len(p.split()) > 40]
    prose = [" ".join(p.split()[:32]) for p in paras[:a.n]]
    for k in [int(x) for x in a.ks.split(",")]:
        proc, base = start(a.dsv4, k, a.threads)
        try:
            for kind in ("chat", "prose"):
                for temp in (0.0, 0.7):
                    before = metrics(base)
                    t0 = time.time(); toks = 0; invalid = 0
                    for i in range(a.n):
                        common = {"max_tokens": a.max_tokens, "temperature": temp, "seed": i}
                        try:
                            if kind == "chat":
                                body = {k2: v for k2, v in chats[i].items() if v is not None}
                                r = post(base, "/v1/chat/completions", {**body, **common})
                            else:
                                r = post(base, "/v1/completions", {"prompt": prose[i], **common})
                        except urllib.error.HTTPError as e:
                            # The server answers 500 invalid_model_output when the model calls
                            # a tool the request did not offer: its drafts still count (the
                            # metrics below), its tokens are not reported.
                            if e.code != 500 or b"invalid_model_output" not in e.read():
                                raise
                            invalid += 1
                            continue
                        toks += r["usage"]["completion_tokens"]
                    dt = time.time() - t0
                    after = metrics(base)
                    drafts = after["drafts"] - before["drafts"]
                    per = [(after["pos"].get(p, 0) - before["pos"].get(p, 0)) / max(drafts, 1)
                           for p in range(k)]
                    mal = 1 + sum(per)
                    print(f"K={k} {kind:5s} T={temp}: {toks} tokens, {drafts:.0f} verify steps, "
                          f"accepted per position " + " ".join(f"{x:.1%}" for x in per) +
                          f", mean accepted length {mal:.2f}, {toks / dt:.1f} tok/s end to end"
                          + (f" ({invalid} answers were invalid model output)" if invalid else ""),
                          flush=True)
        finally:
            proc.terminate(); proc.wait()


if __name__ == "__main__":
    main()
