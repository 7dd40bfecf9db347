#!/usr/bin/env bash
# Prints the path of a headless-capable Chromium for the chat page's browser tests
# (test/ui.test.ts, scripts/screenshots.ts, benches/page-weight.ts): $WICK_CHROMIUM (a path or
# a command; set but missing means no browser), else the system's chromium; Debian's `chromium`
# package is installed here when it is missing and apt-get is usable as root. Nothing is downloaded by npm (puppeteer-core has no browser).
# Exit 2, with the reason on stderr, when no browser can be had.
set -uo pipefail
find_browser() {
  for b in "${WICK_CHROMIUM:-}" chromium chromium-browser google-chrome-stable google-chrome; do
    [ -n "$b" ] && command -v "$b" >/dev/null && { command -v "$b"; return 0; }
  done
  return 1
}
# An explicit WICK_CHROMIUM that is not there is an answer: no browser (nothing installed).
if [ -n "${WICK_CHROMIUM:-}" ] && ! command -v "$WICK_CHROMIUM" >/dev/null; then
  echo "chromium: WICK_CHROMIUM=$WICK_CHROMIUM is not an executable" >&2
  exit 2
fi
find_browser && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core) >/dev/null 2>&1
fi
find_browser && exit 0
echo "chromium: not installed and cannot be installed (apt-get install chromium, as root)" >&2
exit 2
