#!/usr/bin/env bash
# Expert parallelism end to end (docs/scale-out.md): `mpirun -np N dsv4
# generate --ep N` on the tiny model gives exactly the one-process output
# (tokens and every printed logprob, which round-trips the float) for N = 2
# and 4, greedy and seeded sampling, without MTP and with K = 1..3; unsound
# combinations are refused with one line; ranks running different binaries
# are refused at start-up.
# Usage: ep_generate_test.sh DSV4_BINARY
set -euo pipefail
dsv4=$1
here=$(cd "$(dirname "$0")" && pwd)
mpirun_sh=$here/mpirun.sh
source "$here/ep_common.sh"
make_tiny "$tmp/m"
ids=$(seq -s, 1 200)  # a 200-token prompt: crosses 4- and 128-token blocks and pages
engine=(--model "$tmp/m" --kv-cache-memory 64M --threads 1 --generation-config vllm
        --prompt "Hello world" --prompt "The capital of France is")
greedy='{"max_new_tokens":20,"logprobs":3,"ignore_eos":true}'
sampled='{"max_new_tokens":20,"logprobs":2,"temperature":0.8,"top_k":32,"seed":11,"ignore_eos":true}'

run() {  # run OUT NP CONFIG K: one generate (NP 1: no mpirun), stdout without the timing line
  run_generate "$1" "$2" "$4" "${engine[@]}" --generate-config "$3"
}

for k in 0 1 2 3; do
  for mode in greedy sampled; do
    config=$greedy
    [[ $mode == sampled ]] && config=$sampled
    run "$tmp/one.$mode.$k" 1 "$config" "$k"
    grep -q '"logprob"' "$tmp/one.$mode.$k" || fail "no logprobs printed"
    for np in 2 4; do
      run "$tmp/ep$np.$mode.$k" "$np" "$config" "$k"
      cmp -s "$tmp/one.$mode.$k" "$tmp/ep$np.$mode.$k" || {
        diff "$tmp/one.$mode.$k" "$tmp/ep$np.$mode.$k" >&2 || true
        fail "$mode, K = $k: $np ranks differ from one"
      }
      # Rank 1's start-up line (on this one-node host: node 0 of 1, placement a no-op).
      line="rank 1 of $np \\(local rank 1, node 0 of 1\\): 1 compute thread, routed experts"
      line+=" \\[$((8 / np)), $((16 / np))\\) of 8 in every MoE layer \\([0-9.]+ MiB\\),"
      line+=" weights mapped [0-9.]+ MiB, cache"
      line+=" [0-9.]+ MiB \\([0-9]+ requests at max length\\), fingerprint [0-9a-f]{12}$"
      grep -qE "$line" "$tmp/ep$np.$mode.$k.err" || { grep "rank 1 of" "$tmp/ep$np.$mode.$k.err" >&2; fail "no rank line"; }
    done
  done
done
# The long prompt through the prompt-ids path, 2 ranks, K = 2.
engine=(--model "$tmp/m" --kv-cache-memory 64M --threads 1 --generation-config vllm
        --prompt-ids "$ids")
run "$tmp/one.long" 1 "$greedy" 2
run "$tmp/ep2.long" 2 "$greedy" 2
cmp -s "$tmp/one.long" "$tmp/ep2.long" || fail "200-token prompt: 2 ranks differ from one"
# Two prompts sharing those 200 tokens (what a prefix cache may serve from
# the first one's pages), 4 ranks, K = 1.
engine=(--model "$tmp/m" --kv-cache-memory 64M --threads 1 --generation-config vllm
        --prompt-ids "$ids" --prompt-ids "$ids,7,8,9")
run "$tmp/one.shared" 1 "$greedy" 1
run "$tmp/ep4.shared" 4 "$greedy" 1
cmp -s "$tmp/one.shared" "$tmp/ep4.shared" || fail "shared prefix: 4 ranks differ from one"
echo "identical outputs: 1 vs 2 and 4 ranks, greedy and seeded, K = 0..3"

# --numa auto, applied by every rank itself from rank 0's options (this
# one-node host: local rank 1 -> node 1 % 1 = 0, a no-op); then only the
# rank's experts mapped, from the checkpoint, from the 2-rank sidecar that
# `--prepacked auto` finds, and from a 4-rank sidecar named explicitly (any
# stacking binds).
saved=("${engine[@]}")
engine=(--model "$tmp/m" --kv-cache-memory 64M --threads 1 --generation-config vllm
        --prompt "Hello world")
run "$tmp/one.plain" 1 "$greedy" 0
engine+=(--numa auto)
run "$tmp/ep2.numa" 2 "$greedy" 0
cmp -s "$tmp/one.plain" "$tmp/ep2.numa" || fail "--numa auto: 2 ranks differ from one"
grep -qE "rank 1 of 2 \(local rank 1, node 0 of 1, numa auto: node 0\): " "$tmp/ep2.numa.err" \
  || { grep "rank 1 of" "$tmp/ep2.numa.err" >&2; fail "--numa auto: rank 1's line"; }
grep -qE "rank 1 of 2: bound routed experts \[4, 8\) of 8 \([0-9.]+ MiB\); unmapped [1-9][0-9.]* MiB" \
  "$tmp/ep2.numa.err" || { grep "rank 1 of" "$tmp/ep2.numa.err" >&2; fail "other experts mapped"; }
"$dsv4" prepack --model "$tmp/m" --ranks 2 > /dev/null 2>&1 || fail "prepack --ranks 2"
run "$tmp/ep2.r2" 2 "$greedy" 0
cmp -s "$tmp/one.plain" "$tmp/ep2.r2" || fail "2-rank sidecar: 2 ranks differ from one"
[[ $(grep -c "Using prepacked sidecar $tmp/m/dsv4-stacked-r2.safetensors" "$tmp/ep2.r2.err") == 2 ]] \
  || { cat "$tmp/ep2.r2.err" >&2; fail "the 2-rank sidecar is not used by both ranks"; }
"$dsv4" prepack --model "$tmp/m" --ranks 4 -o "$tmp/r4.safetensors" > /dev/null 2>&1 \
  || fail "prepack --ranks 4"
engine+=(--prepacked "$tmp/r4.safetensors")
run "$tmp/ep2.r4" 2 "$greedy" 0
cmp -s "$tmp/one.plain" "$tmp/ep2.r4" || fail "4-rank sidecar: 2 ranks differ from one"
[[ $(grep -c "Using prepacked sidecar $tmp/r4.safetensors" "$tmp/ep2.r4.err") == 2 ]] \
  || { cat "$tmp/ep2.r4.err" >&2; fail "the 4-rank sidecar is not used by both ranks"; }
grep -qE "rank 1 of 2: bound routed experts \[4, 8\) of 8 \([0-9.]+ MiB\); unmapped [1-9][0-9.]* MiB" \
  "$tmp/ep2.r4.err" || { grep "rank 1 of" "$tmp/ep2.r4.err" >&2; fail "sidecar: other experts mapped"; }
echo "--numa auto per rank, own experts mapped (checkpoint, 2- and 4-rank sidecars): ok"
engine=("${saved[@]}")

# bench --ep 2: each engine run prints rank 0's step time split into compute
# and communication and the bytes exchanged per token per MoE layer (tiny:
# top-2 x hidden 256 x 2 bytes = 1024); rank 1 logs its own split.
"$mpirun_sh" 2 "$dsv4" bench --model "$tmp/m" --ep 2 --threads 1 --prompt-len 16 \
  --decode-steps 4 --prepacked off > "$tmp/bench.out" 2> "$tmp/bench.err" \
  || { cat "$tmp/bench.err" >&2; fail "bench --ep 2"; }
split='^    rank 0 of 2: [0-9]+ steps, [0-9.]+ ms per step = compute [0-9.]+ \+ communication'
split+=' [0-9.]+ \([0-9.]+%: MoE all-gathers [0-9.]+, plan broadcast [0-9.]+\); 1024 bytes'
split+=' exchanged per token per MoE layer \(all ranks; rank 0 sent [0-9]+, received [0-9]+;'
grep -qE "$split" "$tmp/bench.out" || { cat "$tmp/bench.out" >&2; fail "bench --ep 2: no split"; }
grep -qE 'rank 1 of 2: [0-9]+ steps in [0-9.]+ s \([0-9.]+ ms per step: compute [0-9.-]+, MoE exchange [0-9.]+, plan broadcast 0.00\); .*\b1024 bytes of routed outputs per token' \
  "$tmp/bench.err" || { cat "$tmp/bench.err" >&2; fail "bench --ep 2: rank 1's split"; }
echo "bench --ep 2 split: ok"

expect_refusal() {  # expect_refusal NAME REGEX CMD...: exit status != 0, stderr matches REGEX
  local name=$1 regex=$2
  shift 2
  if "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"; then fail "$name: accepted"; fi
  grep -qE -- "$regex" "$tmp/$name.err" || { cat "$tmp/$name.err" >&2; fail "$name: message"; }
}
g=("$dsv4" generate "${engine[@]}" --generate-config '{"max_new_tokens":2}')
expect_refusal no-mpirun "--ep 2 needs 2 ranks: start dsv4 with mpirun -np 2" "${g[@]}" --ep 2
expect_refusal ep-vs-size "--ep 1 but mpirun started 2 ranks" "$mpirun_sh" 2 "${g[@]}"
expect_refusal divide "--ep 3 does not divide the model's 8 routed experts" \
  "$mpirun_sh" 3 "${g[@]}" --ep 3
expect_refusal numa-node "--numa node:1: the host has 1 NUMA node \\(0..0\\)" \
  "$mpirun_sh" 2 "${g[@]}" --ep 2 --numa node:1
# Rank 1 runs a different binary (one byte appended): refused at start-up.
cp "$dsv4" "$tmp/dsv4-other"
printf 'x' >> "$tmp/dsv4-other"
args=(--oversubscribe --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" = 0 ] && args+=(--allow-run-as-root)
expect_refusal binary "rank 1 runs another binary or checkpoint than rank 0" \
  mpirun "${args[@]}" -np 1 "${g[@]}" --ep 2 : -np 1 "$tmp/dsv4-other" generate
echo "refusals ok"
