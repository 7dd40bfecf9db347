#!/usr/bin/env bash
# The Python the converter's reference checks use (numpy for scripts/hf-reference.py, numpy and
# pyyaml for llama.cpp's gguf-py in scripts/check-convert.py): a small venv from PyPI, no torch.
# Usage: bash scripts/py-venv.sh [dir]   (default .cache/py; prints the interpreter's path)
# Tests find it at .cache/py/bin/python, or use WICK_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-.cache/py}"
if ! "$DIR/bin/python" -c "import numpy, yaml" 2>/dev/null; then
  python3 -m venv "$DIR"
  "$DIR/bin/pip" install --quiet --disable-pip-version-check "numpy==2.4.*" "pyyaml==6.0.*"
fi
echo "$DIR/bin/python"
