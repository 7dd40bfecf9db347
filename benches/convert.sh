#!/usr/bin/env bash
# The converter benchmark: writes the 0.9 GB synthetic bf16 checkpoint (LFM2-350M layout with
# a 6912-wide FFN, GPT-2 vocabulary, 4 shards; `wick-fixtures --hf-bench`) once, then converts
# it with the wick-convert binary to each output type and prints one JSON line per run:
# seconds, MB/s (checkpoint bytes read / wall time), peak RSS and the largest tensor.
# The checkpoint is in the page cache (just written or read by the previous run): this
# measures the converter, not the disk.
#
#   bash benches/convert.sh [dir]     (default .cache/bench-convert; TYPES="f16 q4_k_m" to choose)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
DIR="${1:-.cache/bench-convert}"
TYPES="${TYPES:-f16 bf16 q8_0 q4_0 q4_k_m q5_k_m q6_k}"
cargo build $CARGO_RELEASE -q -p wick-convert -p wick-fixtures
BIN="${CARGO_TARGET_DIR:-target}/$TRIPLE/release"
mkdir -p "$DIR"
[ -f "$DIR/hf-bench-lfm2/config.json" ] || "$BIN/wick-fixtures" "$DIR" --hf-bench >/dev/null
for t in $TYPES; do
  "$BIN/wick-convert" "$DIR/hf-bench-lfm2" --outfile "$DIR/out-$t.gguf" --outtype "$t" --json 2>/dev/null
  rm -f "$DIR/out-$t.gguf"
done
