#!/usr/bin/env bash
# Cross-builds the macOS addons (darwin-arm64: Apple silicon, darwin-x64: Intel Macs) on Linux with
# cargo-zigbuild (zig as the linker; ziglang and cargo-zigbuild from PyPI into .zig/, the Rust
# standard libraries from rustup), into artifacts/bindings-<triple>/, and prints each addon's
# path and size. They link only libSystem, libiconv and libcharset, which every macOS has; they
# cannot be run here (no macOS). Profile: WICK_DARWIN_PROFILE (default release; dist for the
# shipped LTO + stripped build).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${WICK_DARWIN_PROFILE:-release}
[ -x .zig/bin/cargo-zigbuild ] || { python3 -m venv .zig && .zig/bin/pip install -q ziglang cargo-zigbuild; }
for triple in aarch64-apple-darwin x86_64-apple-darwin; do
  rustup target list --installed | grep -qx "$triple" || rustup target add "$triple" >/dev/null
  PATH=$PWD/.zig/bin:$PATH npx napi build --platform --profile "$profile" --manifest-path crates/wick-node/Cargo.toml \
    --target "$triple" -x --no-js -o "artifacts/bindings-$triple" >&2
  for f in artifacts/bindings-$triple/wick.*.node; do echo "$f $(stat -c %s "$f") bytes"; done
done
