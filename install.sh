#!/usr/bin/env bash
# Installs what authsvc needs, idempotently: npm dependencies, the sidecar
# build, a Python with aiohttp for the stand-in host. With --test also the
# test tools (Debian chromium, oathtool, zbarimg, an aiohttp 3.11 copy for the second
# plugin run). With COMFYUI_DIR set, links this package into its custom_nodes.
#   bash install.sh [--quiet] [--test]
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
QUIET=0; TEST=0
for arg in "$@"; do
  case "$arg" in
    --quiet) QUIET=1 ;;
    --test) TEST=1 ;;
    *) echo "install.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
say() { [ "$QUIET" = 1 ] || echo "install.sh: $*"; }

node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then echo "install.sh: Node.js >= 20 is required" >&2; exit 1; fi

# npm dependencies: reinstall when the lockfile changed since the last install
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  say "installing npm dependencies"
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
fi

# sidecar build: when any source is newer than the build
if [ ! -f sidecar/dist/main.js ] || [ -n "$(find sidecar/src sidecar/tsconfig.json -newer sidecar/dist/main.js -print -quit)" ]; then
  say "building the sidecar"
  rm -rf sidecar/dist
  npx --no-install tsc -p sidecar/tsconfig.json
fi

apt_install() {
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "install.sh: please install these Debian packages: $*" >&2; return 1
  fi
  if [ ! -f /tmp/.authsvc-apt-updated ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && touch /tmp/.authsvc-apt-updated
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

PYTHON=${AUTHSVC_PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c 'import aiohttp' 2>/dev/null; then
  apt_install python3-aiohttp
fi

if [ "$TEST" = 1 ]; then
  missing=()
  command -v chromium >/dev/null || missing+=(chromium)
  command -v oathtool >/dev/null || missing+=(oathtool)
  command -v zbarimg >/dev/null || missing+=(zbar-tools)
  if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi
  bash scripts/aiohttp311.sh >/dev/null
fi

if [ -n "${COMFYUI_DIR:-}" ]; then
  target="$COMFYUI_DIR/custom_nodes/authsvc"
  if [ ! -e "$target" ]; then
    ln -s "$ROOT" "$target"
    say "linked into $target"
  fi
fi
