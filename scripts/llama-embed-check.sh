#!/usr/bin/env bash
# Checks the embedding / rerank fixtures (crates/wick-fixtures/src/embedding.rs) against
# llama.cpp's llama-server: each loads, and its endpoint answers finite vectors of the expected
# width (CLS-pooled embed: 64; ColBERT with --pooling none: 32 per token; rerank: one score per
# document; the causal tiny-lfm2 with --pooling mean: 64), and the hyperparameters llama.cpp
# read from the keys are the ones written.
#
# Usage: scripts/llama-embed-check.sh [fixtures_dir] [port]
#   fixtures_dir  default $WICK_FIXTURES (scripts/env.sh); written by `wick-fixtures <dir>`
#   LLAMA_SERVER  default .cache/llama-build/bin/llama-server
#                 (WICK_LLAMA_ONLY="llama-server" bash scripts/build-llama-server.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
dir=${1:-$WICK_FIXTURES}
port=${2:-18091}
server=${LLAMA_SERVER:-$PWD/.cache/llama-build/bin/llama-server}
base="http://127.0.0.1:$port"
log=$(mktemp)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null || true; rm -f "$log"; }
trap cleanup EXIT

start() { # model, extra flags...
  local m="$dir/$1"; shift
  "$server" -m "$m" --embeddings -fa off -t 2 -c 512 -b 512 -ub 512 -lv 4 \
    --port "$port" --host 127.0.0.1 "$@" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do
    curl -sf "$base/health" >/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { tail -20 "$log"; echo "FAIL: llama-server exited on $m" >&2; exit 1; }
    sleep 0.5
  done
  echo "FAIL: llama-server did not come up for $m" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
# The hparams llama.cpp printed, e.g. `hparam "pooling type" 2`.
hparam() {
  local got
  got=$(grep -m1 "print_info: $1 *=" "$log" | sed 's/.*= *//')
  [ "$got" = "$2" ] || { echo "FAIL: $1 = '$got', want '$2'" >&2; exit 1; }
}
post() { curl -sf "$base$1" -H 'Content-Type: application/json' -d "$2"; }
check() { # python expression over r (the parsed answer); prints a summary
  python3 -c "
import json, math, sys
r = json.load(sys.stdin)
fin = lambda v: all(math.isfinite(x) for x in v)
$1"
}

start tiny-lfm2-embed-q8_0.gguf
hparam "pooling type" 2
hparam "causal attn" 0
post /v1/embeddings '{"input":["hello world","the cat sat on the mat"]}' | check '
e = [d["embedding"] for d in r["data"]]
assert len(e) == 2 and all(len(v) == 64 and fin(v) for v in e), r
print("embed (CLS):", [len(v) for v in e], "norms", [round(sum(x * x for x in v) ** 0.5, 4) for v in e], "e0[:3]", [round(x, 4) for x in e[0][:3]])'
stop

start tiny-lfm2-colbert-q8_0.gguf --pooling none
hparam "causal attn" 1
hparam "n_embd_out" 32
post /embeddings '{"content":"hello world, the cat"}' | check '
v = r[0]["embedding"]
assert len(v) > 1 and all(len(t) == 32 and fin(t) for t in v), r
print("colbert (none):", len(v), "tokens x", len(v[0]), "t0[:3]", [round(x, 4) for x in v[0][:3]])'
stop

start tiny-qwen3-rerank-q8_0.gguf --rerank
hparam "pooling type" 4
hparam "n_cls_out" 2
# Scores are softmax(yes, no)[yes] at the last token; with random weights the yes/no logits lie
# far apart, so they sit near 0 (or 1) but differ from document to document.
post /v1/rerank '{"query":"a","documents":["b","c","a cat"]}' | check '
s = [x["relevance_score"] for x in sorted(r["results"], key=lambda x: x["index"])]
assert len(s) == 3 and fin(s) and all(0 <= x <= 1 for x in s) and len(set(s)) == 3, r
print("rerank:", ["%.3e" % x for x in s])'
stop

# print_info shows the file's pooling type (none: -1); --pooling sets the context's.
start tiny-lfm2-q8_0.gguf --pooling mean
hparam "pooling type" -1
post /v1/embeddings '{"input":"hello world"}' | check '
v = r["data"][0]["embedding"]
assert len(v) == 64 and fin(v), r
print("lfm2 (mean):", len(v), "v[:3]", [round(x, 4) for x in v[:3]])'
stop
echo "llama-embed-check: ok"
