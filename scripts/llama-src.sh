#!/usr/bin/env bash
# Unpacks the llama.cpp source that ships inside the node-llama-cpp npm package into
# .cache/llama.cpp (vocab-only GGUFs + tokenizer corpora in models/, chat templates, and the
# source llama-server is built from). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.cache/llama.cpp
bundle=node_modules/node-llama-cpp/llama/gitRelease.bundle
[ -f "$bundle" ] || { echo "missing $bundle: run npm install first" >&2; exit 1; }
if [ ! -d "$dest/models" ]; then
  rm -rf "$dest"; mkdir -p .cache
  git -c advice.detachedHead=false clone -q "$bundle" "$dest"
fi
echo "$dest"
