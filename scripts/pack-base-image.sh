#!/usr/bin/env bash
# A stand-in for node:20-bookworm-slim where no container registry can be reached (this
# project's machines reach only package registries): Debian bookworm from Debian's mirror
# (debootstrap, minbase) plus this machine's Node 20 (the nodejs package's files), imported
# into podman as localhost/wick-node-base:bookworm. test/package-docker.test.ts builds the
# Dockerfile on it with --build-arg NODE_IMAGE=localhost/wick-node-base:bookworm.
# Needs root, debootstrap and podman (apt-get install podman debootstrap).
# Usage: scripts/pack-base-image.sh [rootfs]   (a debootstrapped directory to use, e.g. a
# previous run's; it is changed in place; default: a fresh one, removed afterwards)
set -euo pipefail
image=${WICK_BASE_IMAGE:-localhost/wick-node-base:bookworm}
if [ -n "${1:-}" ]; then
  rootfs=$1
else
  rootfs=$(mktemp -d /tmp/wick-rootfs.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >&2
fi
# Node 20 from the files of this machine's nodejs package.
dpkg -L nodejs | while read -r f; do if [ -f "$f" ] || [ -L "$f" ]; then echo "$f"; fi; done >"$rootfs/.files"
tar -C / -cf - -T "$rootfs/.files" | tar -C "$rootfs" -xf -
rm "$rootfs/.files"
# npm as this machine runs it (it may have been upgraded past the package's own copy).
tar -C / -cf - "$(npm root -g)/npm" | tar -C "$rootfs" -xf -
# This machine's CA bundle: registries may be reached through a TLS-inspecting proxy.
ca=/etc/ssl/certs/ca-certificates.crt
mkdir -p "$rootfs/etc/ssl/certs" && cp "$ca" "$rootfs/$ca"
chroot "$rootfs" node --version >&2
tar -C "$rootfs" -cf - . | podman import --change 'CMD ["node"]' --change "ENV NODE_EXTRA_CA_CERTS=$ca" - "$image" >&2
echo "$image"
