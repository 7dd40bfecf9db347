#!/usr/bin/env bash
# A stand-in for node:20-bookworm-slim where no container registry can be reached (this
# project's machines reach only package registries): Debian bookworm from Debian's mirror
# (debootstrap, minbase) plus this machine's Node 20 (the nodejs package's files), imported
# into podman as localhost/wick-node-base:bookworm. test/package-docker.test.ts builds the
# Dockerfile on it with --build-arg NODE_IMAGE=localhost/wick-node-base:bookworm.
# Needs root, debootstrap and podman (apt-get install podman debootstrap).
set -euo pipefail
image=${WICK_BASE_IMAGE:-localhost/wick-node-base:bookworm}
rootfs=$(mktemp -d /tmp/wick-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >&2
# Node as the node image has it (/usr/local), from the files of this machine's nodejs package.
dpkg -L nodejs | while read -r f; do [ -f "$f" ] && [ ! -L "$f" ] && echo "$f"; done >"$rootfs/.files"
dpkg -L nodejs | while read -r f; do [ -L "$f" ] && echo "$f"; done >>"$rootfs/.files"
tar -C / -cf - -T "$rootfs/.files" | tar -C "$rootfs" -xf -
rm "$rootfs/.files"
chroot "$rootfs" node --version >&2
tar -C "$rootfs" -cf - . | podman import --change 'CMD ["node"]' - "$image" >&2
echo "$image"
