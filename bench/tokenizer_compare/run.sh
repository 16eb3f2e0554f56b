#!/usr/bin/env bash
# Side-by-side tokenizer benchmark: dsv4's tokenizer vs the Hugging Face Rust
# engine (npm @anush008/tokenizers, benchmark-only) on the same tokenizer.json
# and the same multi-MB mixed corpus, single thread; also checks that both
# produce identical ids.
#
#   bench/tokenizer_compare/run.sh [BUILD_DIR] [MB]
#
# BUILD_DIR (default build/release) must have been configured with
# DSV4_BUILD_BENCH=ON; the script builds text_tokenizer_bench there.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
build="${1:-$repo/build/release}"
mb="${2:-4}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2)
ninja -C "$build" text_tokenizer_bench >&2
node "$here/make_inputs.js" "$repo" "$work" "$mb"
"$build/bench/text_tokenizer_bench" "$work/tokenizer_v4.json" "$work/corpus.txt" --ids-out "$work/dsv4.ids"
(cd "$here" && node hf_bench.js "$work/tokenizer_v4.json" "$work/corpus.txt" "$work/hf.ids")
if cmp -s "$work/dsv4.ids" "$work/hf.ids"; then
  echo "ids: identical ($(($(stat -c %s "$work/dsv4.ids") / 4)) ids)"
else
  echo "ids: DIFFERENT" >&2
  exit 1
fi
