#!/usr/bin/env bash
# The Metal build (candle's `metal` feature through wick-core and wick-node) compiled for Apple
# silicon: `cargo check` only (no macOS SDK or Mac here to link or run it; docs/gpu.md), in its
# own target dir (WICK_METAL_TARGET_DIR, default target/metal-check). Installs rustup's aarch64-apple-darwin standard library when missing, and zig
# (PyPI's ziglang and cargo-zigbuild, as scripts/build-darwin.sh does): the C parts of the
# dependencies (tokenizers' oniguruma) are compiled for the target even by `cargo check`.
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-apple-darwin
rustup target list --installed 2>/dev/null | grep -qx "$target" || rustup target add "$target" >/dev/null
[ -x .zig/bin/cargo-zigbuild ] || { python3 -m venv .zig && .zig/bin/pip install -q ziglang cargo-zigbuild; }
PATH=$PWD/.zig/bin:$PATH cargo-zigbuild check -q -p wick-core -p wick-node --features wick-core/metal,wick-node/metal --target "$target" \
  --target-dir "${WICK_METAL_TARGET_DIR:-target/metal-check}"
