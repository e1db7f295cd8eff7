#!/usr/bin/env bash
# System packages the tests start for real: PostgreSQL (scale-out test) and Chromium (UI test).
# Installed from Debian's packages when missing; needs root (or sudo).
set -euo pipefail
missing=()
if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing ${missing[*]} from Debian's packages"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
