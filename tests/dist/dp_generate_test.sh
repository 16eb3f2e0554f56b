#!/usr/bin/env bash
# DP attention across ranks end to end (docs/scale-out.md "DP attention"):
# `mpirun -np N dsv4 generate --dp N --ep N` on the tiny model prints exactly
# what one process with `--dp N` prints (tokens and every logprob), greedy and
# seeded sampling, without MTP and with K = 1 (greedy K = 3 too): three prompts of different
# lengths (partitions with two requests and with one, so a rank runs out of
# rows while another still decodes) and one prompt alone (the other ranks
# idle in every step).  Rank 1 says which partition it holds; unsound
# combinations are refused with one line.
# Usage: dp_generate_test.sh DSV4_BINARY [NP...]   (default NP: 2)
set -euo pipefail
dsv4=$1
shift
nps=("$@")
((${#nps[@]} > 0)) || nps=(2)
here=$(cd "$(dirname "$0")" && pwd)
mpirun_sh=$here/mpirun.sh
source "$here/ep_common.sh"
make_tiny "$tmp/m"
three=(--prompt "Hello world" --prompt "The capital of France is"
       --prompt-ids "$(seq -s, 1 40)")
one=(--prompt "The capital of France is")
greedy='{"max_new_tokens":12,"logprobs":2,"ignore_eos":true}'
sampled='{"max_new_tokens":12,"logprobs":2,"temperature":0.8,"top_k":32,"seed":11,"ignore_eos":true}'

run() {  # run OUT NP DP CONFIG K PROMPTS...: one generate (NP 1: no mpirun), stdout sans timing
  local out=$1 np=$2 dp=$3 config=$4 k=$5
  shift 5
  run_generate "$out" "$np" "$k" --model "$tmp/m" --kv-cache-memory 64M --threads 1 \
    --generation-config vllm --dp "$dp" "$@" --generate-config "$config"
}

same() {  # same REF OUT WHAT
  cmp -s "$1" "$2" || { diff "$1" "$2" >&2 || true; fail "$3"; }
}

for np in "${nps[@]}"; do
  for k in 0 1; do
    for mode in greedy sampled; do
      config=$greedy
      [[ $mode == sampled ]] && config=$sampled
      run "$tmp/one.$np.$mode.$k" 1 "$np" "$config" "$k" "${three[@]}"
      grep -q '"logprob"' "$tmp/one.$np.$mode.$k" || fail "no logprobs printed"
      run "$tmp/dp.$np.$mode.$k" "$np" "$np" "$config" "$k" "${three[@]}"
      same "$tmp/one.$np.$mode.$k" "$tmp/dp.$np.$mode.$k" "$mode, K = $k: $np ranks differ"
    done
  done
  line="rank 1 of $np \\(local rank 1, node 0 of 1\\): 1 compute thread, attention for DP"
  line+=" partition 1 of $np, routed experts \\[$((8 / np)), $((16 / np))\\) of 8 in every MoE"
  line+=" layer \\([0-9.]+ MiB\\), weights mapped [0-9.]+ MiB, cache [0-9.]+ MiB \\([0-9]+"
  line+=" requests? at max length\\)"
  grep -qE "$line" "$tmp/dp.$np.greedy.0.err" || { grep "rank 1 of" "$tmp/dp.$np.greedy.0.err" >&2; fail "no rank line"; }
  # Three drafts per step (K = 3: chained MTP forwards, rows rolled back per rank).
  run "$tmp/one.$np.greedy.3" 1 "$np" "$greedy" 3 "${three[@]}"
  run "$tmp/dp.$np.greedy.3" "$np" "$np" "$greedy" 3 "${three[@]}"
  same "$tmp/one.$np.greedy.3" "$tmp/dp.$np.greedy.3" "greedy, K = 3: $np ranks differ"
  # One request: rank 0 holds it, every other rank only fills in.
  run "$tmp/one.$np.single" 1 "$np" "$greedy" 1 "${one[@]}"
  run "$tmp/dp.$np.single" "$np" "$np" "$greedy" 1 "${one[@]}"
  same "$tmp/one.$np.single" "$tmp/dp.$np.single" "one request, K = 1: $np ranks differ"
  echo "identical outputs: --dp $np in one process vs $np ranks, greedy and seeded, K = 0 and 1; greedy K = 3"
done

expect_refusal() {  # expect_refusal NAME REGEX CMD...: exit status != 0, stderr matches REGEX
  local name=$1 regex=$2
  shift 2
  if "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"; then fail "$name: accepted"; fi
  grep -qE -- "$regex" "$tmp/$name.err" || { cat "$tmp/$name.err" >&2; fail "$name: message"; }
  # Every rank refuses before serving: nothing was generated.
  [[ ! -s $tmp/$name.out ]] || fail "$name: printed output"
}
g=("$dsv4" generate --model "$tmp/m" --kv-cache-memory 64M --threads 1 "${one[@]}"
   --generate-config '{"max_new_tokens":2}')
expect_refusal dp3 "--dp 3 with 2 ranks: data-parallel attention across ranks runs one partition per rank .*give --dp 2 or --dp 1" \
  "$mpirun_sh" 2 "${g[@]}" --ep 2 --dp 3
echo "refusals ok"

# Each rank holds one partition, so that partition gets the rank's whole cache
# budget (one process with --dp 2 splits its budget in two): 8 MiB each here.
"$mpirun_sh" 2 "$dsv4" generate --model "$tmp/m" --kv-cache-memory 8M --threads 1 "${one[@]}" \
  --generate-config '{"max_new_tokens":2}' --ep 2 --dp 2 > "$tmp/budget.out" 2> "$tmp/budget.err" \
  || { cat "$tmp/budget.err" >&2; fail "budget run"; }
for r in 0 1; do
  grep -qE "rank $r of 2 .*attention for DP partition $r of 2, .* cache 8\.0 MiB" "$tmp/budget.err" \
    || { grep "rank $r of 2" "$tmp/budget.err" >&2; fail "rank $r: its partition is not its whole budget"; }
done
echo "each rank's partition takes the rank's whole cache budget"
