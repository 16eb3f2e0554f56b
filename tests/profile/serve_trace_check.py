#!/usr/bin/env python3
"""A served run's trace holds every request with its finish reason.

Usage: serve_trace_check.py DSV4_BINARY WORK_DIR

Makes the tiny random checkpoint (make-tiny), starts `dsv4 serve --profile --profile-level
e2e` on a free port, POSTs /start_profile, sends completions (plain, streamed, n = 2, a stop at
max_tokens, one aborted by a client that leaves), POSTs /stop_profile and checks the trace:
every engine request submitted during the session has one async "request" track closed with a
finish_reason, and the reasons match what the HTTP answers said; every step span holds its
schedule / execute / commit children; each HTTP request is an http.* span. Then SIGTERM.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request


def post(port, path, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else b""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "tiny")
    subprocess.run([binary, "make-tiny", "--preset", "tiny", "--seed", "3", "--out", model,
                    "--force"], check=True, capture_output=True)
    out = os.path.join(work, "profile")
    server = subprocess.Popen(
        [binary, "serve", "--model", model, "--port", "0", "--threads", "2", "--kv-cache-memory",
         "64M", "--max-model-len", "256", "--profile", "--profile-level", "e2e",
         "--profile-output", out],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    lines = []
    deadline = time.time() + 120
    while time.time() < deadline:
        line = server.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("Listening on http://"):
            port = int(line.strip().rsplit(":", 1)[1])
            break
    if port is None:
        server.kill()
        fail("server did not start:\n" + "".join(lines))
    try:
        status, body = post(port, "/stop_profile")
        if status != 400 or "no profile is running" not in body:
            fail(f"stop without start: {status} {body}")
        status, body = post(port, "/start_profile")
        if status != 200:
            fail(f"start: {status} {body}")
        trace_path = json.loads(body)["path"]
        expected = []  # finish reasons the HTTP answers gave, one per choice
        for i, req in enumerate([
                {"prompt": [5, 6, 7, 8], "max_tokens": 6, "ignore_eos": True},
                {"prompt": [9, 10], "max_tokens": 3, "ignore_eos": True, "n": 2},
                {"prompt": [11, 12, 13], "max_tokens": 5, "ignore_eos": True, "stream": True},
                {"prompt": list(range(20, 90)), "max_tokens": 4, "ignore_eos": True},
        ]):
            status, body = post(port, "/v1/completions", req)
            if status != 200:
                fail(f"request {i}: {status} {body}")
            if req.get("stream"):
                reasons = [json.loads(l[6:])["choices"][0]["finish_reason"]
                           for l in body.splitlines()
                           if l.startswith("data: {") and '"finish_reason":"' in l]
            else:
                reasons = [c["finish_reason"] for c in json.loads(body)["choices"]]
            expected += reasons
        # A client that leaves mid-stream: its request ends "abort".
        s = socket.create_connection(("127.0.0.1", port))
        payload = json.dumps({"prompt": [3, 4], "max_tokens": 200, "ignore_eos": True,
                              "stream": True})
        s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                   f"\r\nContent-Length: {len(payload)}\r\n\r\n{payload}").encode())
        s.recv(4096)
        s.close()
        expected.append("abort")
        time.sleep(1.0)  # the abort lands within an engine step
        status, body = post(port, "/stop_profile")
        if status != 200:
            fail(f"stop: {status} {body}")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)

    with open(trace_path) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    finished = {}
    begun = set()
    for e in events:
        if e.get("cat") != "request" or e.get("name") != "request":
            continue
        if e["ph"] == "b":
            begun.add(e["id"])
        elif e["ph"] == "e":
            finished[e["id"]] = e["args"]["finish_reason"]
    if begun != set(finished):
        fail(f"request tracks begun {sorted(begun)} but closed {sorted(finished)}")
    got = sorted(finished.values())
    if got != sorted(expected):
        fail(f"finish reasons in the trace {got} != the HTTP answers' {sorted(expected)}")
    steps = [e for e in events if e["ph"] == "X" and e["name"] == "step"]
    children = [e for e in events if e["ph"] == "X" and e["name"] in ("schedule", "execute")]
    if not steps or not children:
        fail("no step spans")
    http = [e for e in events if e["ph"] == "X" and e.get("cat") == "http"
            and e["name"] == "http.completions"]
    if len(http) != 5:
        fail(f"{len(http)} http.completions spans, expected 5")
    print(f"ok: {len(finished)} requests traced with finish reasons {got}; {len(steps)} steps; "
          f"{len(events)} events in {trace_path}")


if __name__ == "__main__":
    main()
