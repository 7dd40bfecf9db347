#!/usr/bin/env bash
# Packs what a release publishes, for the platforms built here: the root package (its
# `prepack` compiles dist/) and one binary package per addon found in ts/native/ (this
# machine's: linux-x64-gnu), the addon copied into npm/<platform>/ as `napi artifacts` does
# with a release's full set. Prints the tarball paths, one a line. Usage: scripts/pack.sh [out-dir]
# WICK_PACK_ADDONS (paths, space-separated) packs those addons instead of ts/native's, e.g. a
# cross-built wick.linux-arm64-gnu.node. The CUDA addon (ts/native/wick.linux-x64-gnu-cuda.node)
# is packed only when named there: the one in ts/native is the test suite's dev build, and the
# release's is `scripts/build-cuda.sh dist` (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-artifacts/pack}")
mkdir -p "$out"
rm -f "$out"/wick-*.tgz # one release's tarballs: none left over from an earlier version
shopt -s nullglob
if [ -n "${WICK_PACK_ADDONS:-}" ]; then read -ra addons <<<"$WICK_PACK_ADDONS"; else addons=(ts/native/wick.*.node); addons=("${addons[@]/*-cuda.node/}"); fi
[ ${#addons[@]} -gt 0 ] || { echo "no addon in ts/native: run npm run build:native" >&2; exit 1; }
for addon in "${addons[@]}"; do
  [ -n "$addon" ] || continue
  platform=$(basename "$addon" .node); platform=${platform#wick.}
  [ -d "npm/$platform" ] || { echo "npm/$platform is missing: not a target in package.json's napi.targets" >&2; exit 1; }
  cp "$addon" "npm/$platform/"
  (cd "npm/$platform" && npm pack --silent --pack-destination "$out" | sed "s|^|$out/|")
done
npm pack --silent --pack-destination "$out" | tail -n 1 | sed "s|^|$out/|"
