# Shared settings for the scripts: one cargo target directory for everything (napi build
# names the host triple explicitly, so cargo commands do too and reuse its artifacts).
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
export CARGO_RELEASE="--release --target $TRIPLE"
export WICK_FIXTURES="${WICK_FIXTURES:-$PWD/.cache/fixtures}"
export WICK_LLAMA_SRC="${WICK_LLAMA_SRC:-$PWD/.cache/llama.cpp}"
