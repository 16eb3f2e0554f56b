#!/usr/bin/python3
"""Resident memory of `dsv4 serve` over many large non-streaming responses.

Starts `dsv4 serve` on a model (a make-tiny checkpoint is enough), sends
--requests completions from --concurrency loopback client threads (each
request: n choices, max_tokens tokens with ignore_eos, top logprobs, so every
response is a large JSON body), samples VmRSS of the server from /proc every
--sample-every requests and prints the curve.  With --max-growth-mib it
fails (exit 1) when RSS after the first --warmup requests grows by more than
that bound; docs/server.md ("Memory over time") has the numbers and why.

Standard library only.  Usage:
  serve_rss.py --dsv4 build/release/apps/dsv4/dsv4 --model /tmp/tiny [--requests 300]
  serve_rss.py --dsv4 ... --tokenizer tokenizer.json ...   (make-tiny into a temp dir)
"""
import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time


def vm_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS")


def start_server(args):
    cmd = [args.dsv4, "serve", "--model", args.model, "--host", "127.0.0.1", "--port", "0",
           "--kv-cache-memory", args.kv_cache_memory, "--max-model-len", str(args.max_model_len),
           "--max-num-seqs", str(args.max_num_seqs), "--threads", str(args.threads)]
    cmd += args.serve_arg
    env = dict(os.environ)
    for kv in args.env:
        k, _, v = kv.partition("=")
        env[k] = v
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    deadline = time.time() + 120
    port = None
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"Listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "startup complete" in line:
            break
    if port is None:
        proc.kill()
        raise RuntimeError("dsv4 serve did not start: " + " ".join(cmd))
    # Keep draining stdout so the server never blocks on a full pipe.
    threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()
    return proc, port


def request_body(args, i):
    # /v1/completions: raw text, so a random-weight model's output is never
    # rejected by the chat output parser (its tool-call grammar).
    body = {"prompt": f"Request {i}: write a long story.", "max_tokens": args.max_tokens,
            "n": args.n, "ignore_eos": True, "temperature": 1.0, "seed": i}
    if args.top_logprobs > 0:
        body["logprobs"] = args.top_logprobs
    return json.dumps(body)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsv4", required=True)
    p.add_argument("--model", help="checkpoint (default: make-tiny into a temp directory)")
    p.add_argument("--tokenizer", help="tokenizer.json for make-tiny (without --model)")
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--top-logprobs", type=int, default=20)
    p.add_argument("--sample-every", type=int, default=20)
    p.add_argument("--warmup", type=int, default=60)
    p.add_argument("--max-growth-mib", type=float, default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--kv-cache-memory", default="256M")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server")
    p.add_argument("--serve-arg", action="append", default=[], help="extra serve flag")
    args = p.parse_args()

    tmp = None
    if args.model is None:
        tmp = tempfile.mkdtemp(prefix="dsv4-serve-rss-")
        args.model = os.path.join(tmp, "model")
        cmd = [args.dsv4, "make-tiny", "--out", args.model]
        if args.tokenizer:
            cmd += ["--tokenizer", args.tokenizer]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return run(args)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def run(args):
    proc, port = start_server(args)
    lock = threading.Lock()
    state = {"next": 0, "done": 0, "bytes": 0, "errors": 0}
    samples = [(0, vm_rss_mib(proc.pid))]
    t_start = time.time()
    print(f"{'requests':>8} {'VmRSS MiB':>10} {'seconds':>8}")
    print(f"{0:>8} {samples[0][1]:>10.1f} {0:>8.1f}", flush=True)

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while True:
            with lock:
                i = state["next"]
                if i >= args.requests:
                    break
                state["next"] += 1
            conn.request("POST", "/v1/completions", body=request_body(args, i),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
            with lock:
                state["bytes"] += len(body)
                if resp.status != 200:
                    state["errors"] += 1
                    if state["errors"] <= 3:
                        print(f"request {i}: HTTP {resp.status}: {body[:300]!r}", flush=True)
                state["done"] += 1
                done = state["done"]
                if done % args.sample_every == 0:
                    rss = vm_rss_mib(proc.pid)
                    samples.append((done, rss))
                    print(f"{done:>8} {rss:>10.1f} {time.time() - t_start:>8.1f}", flush=True)
        conn.close()

    t0 = time.time()
    threads = [threading.Thread(target=client) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.time() - t0
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()

    warm = [rss for done, rss in samples if done >= args.warmup]
    base = warm[0] if warm else samples[-1][1]
    growth = max(warm) - base if warm else 0.0
    print(f"{state['done']} requests ({state['errors']} errors, "
          f"{state['bytes'] / state['done'] / 1024:.0f} KiB per response) in {seconds:.1f} s; "
          f"VmRSS {samples[0][1]:.1f} MiB at start, {base:.1f} MiB after {args.warmup} requests, "
          f"peak {max(r for _, r in samples):.1f} MiB, final {samples[-1][1]:.1f} MiB; "
          f"growth after warm-up {growth:.1f} MiB")
    if state["errors"]:
        print("FAIL: some requests did not return 200")
        return 1
    if args.max_growth_mib is not None and growth > args.max_growth_mib:
        print(f"FAIL: RSS grew by {growth:.1f} MiB after warm-up (bound {args.max_growth_mib} MiB)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
