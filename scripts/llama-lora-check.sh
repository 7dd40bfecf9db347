#!/usr/bin/env bash
# Checks the LoRA adapter fixtures (crates/wick-fixtures/src/lora.rs) against llama.cpp's
# llama-server. For each base (tiny-llama-q8_0, tiny-lfm2-q8_0) and each of its adapters
# (attn-f16, ffn-f32, all-q8_0): llama-server loads it (`--lora`), GET /lora-adapters lists it,
# greedy /completion differs from the base model's, a per-request `lora: [{id: 0, scale: 0}]`
# equals the base and `scale: 0.5` answers (and differs from scale 1), and `--lora-scaled
# file:0` at startup equals the base. Then the broken adapters (--bad set) are refused.
# Prints each answer's tokens, so the outputs can be compared with Wick's.
#
# Usage: scripts/llama-lora-check.sh [fixtures_dir] [port]
#   fixtures_dir  default $WICK_FIXTURES (scripts/env.sh); written by `wick-fixtures <dir>`
#                 (`--bad` for the broken adapters)
#   LLAMA_SERVER  default .cache/llama-build/bin/llama-server
#                 (WICK_LLAMA_ONLY="llama-server" bash scripts/build-llama-server.sh)
#   N_PREDICT     tokens per answer (default 8)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
dir=${1:-$WICK_FIXTURES}
port=${2:-18095}
server=${LLAMA_SERVER:-$PWD/.cache/llama-build/bin/llama-server}
n=${N_PREDICT:-8}
base="http://127.0.0.1:$port"
log=$(mktemp)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; rm -f "$log"; }
trap cleanup EXIT

start() { # model, extra flags...; returns 1 if the server exits
  local m="$dir/$1"; shift
  "$server" -m "$m" -fa off -t 2 -c 512 -lv 4 --port "$port" --host 127.0.0.1 "$@" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do
    curl -sf "$base/health" >/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; pid=; return 1; }
    sleep 0.5
  done
  echo "FAIL: llama-server did not come up for $m $*" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
# Greedy completion's token ids (extra JSON fields in $1, e.g. `,"lora":[...]`).
tokens() {
  curl -sf "$base/completion" -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"hello\",\"n_predict\":$n,\"temperature\":0,\"return_tokens\":true$1}" |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print(" ".join(map(str, r["tokens"])))'
}
want_eq() { [ "$2" = "$3" ] || { echo "FAIL: $1: '$2' != '$3'" >&2; exit 1; }; }
want_ne() { [ "$2" != "$3" ] || { echo "FAIL: $1: both '$2'" >&2; exit 1; }; }

for b in tiny-llama-q8_0 tiny-lfm2-q8_0; do
  start "$b.gguf" || { tail -20 "$log"; echo "FAIL: base $b" >&2; exit 1; }
  ref=$(tokens "")
  stop
  echo "$b base:            $ref"
  for tag in attn-f16 ffn-f32 all-q8_0; do
    f="lora-$b-$tag.gguf"
    start "$b.gguf" --lora "$dir/$f" || { tail -20 "$log"; echo "FAIL: $f did not load" >&2; exit 1; }
    loaded=$(grep -m1 -o "loaded [0-9]* tensors from lora file" "$log" || echo "loaded")
    listed=$(curl -sf "$base/lora-adapters" | python3 -c 'import json,sys; a=json.load(sys.stdin); print(len(a), a[0]["id"], a[0]["scale"], a[0]["path"].split("/")[-1])')
    full=$(tokens "")
    zero=$(tokens ',"lora":[{"id":0,"scale":0}]')
    half=$(tokens ',"lora":[{"id":0,"scale":0.5}]')
    stop
    start "$b.gguf" --lora-scaled "$dir/$f:0" || { tail -20 "$log"; echo "FAIL: $f:0 did not load" >&2; exit 1; }
    scaled0=$(tokens "")
    stop
    echo "$f: $loaded; /lora-adapters: $listed"
    echo "  scale 1:   $full"
    echo "  scale 0.5: $half"
    want_ne "$f scale 1 vs base" "$full" "$ref"
    want_eq "$f request scale 0 vs base" "$zero" "$ref"
    want_eq "$f --lora-scaled :0 vs base" "$scaled0" "$ref"
    want_ne "$f scale 0.5 vs scale 1" "$half" "$full"
  done
done

# The broken adapters, if written (--bad): llama-server must refuse them.
for f in bad-lora-wrong-base bad-lora-wrong-shape; do
  [ -f "$dir/$f.gguf" ] || { echo "skipped: $dir/$f.gguf (write with --bad)"; continue; }
  for b in tiny-llama-q8_0 tiny-lfm2-q8_0; do
    if start "$b.gguf" --lora "$dir/$f.gguf"; then
      stop
      echo "FAIL: $f loaded on $b" >&2; exit 1
    fi
    echo "$f on $b: refused: $(grep -m1 -o 'failed to apply lora adapter: .*' "$log" || tail -1 "$log")"
  done
done
echo "OK"
