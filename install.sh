#!/usr/bin/env bash
# Installs what authsvc needs, idempotently: npm dependencies, the sidecar
# build, a Python with aiohttp for the stand-in host. With --test also the
# test tools (Debian chromium, oathtool, zbarimg, redis-server, postgresql, an aiohttp 3.11 copy for the second
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

PYTHON=${AUTHSVC_PYTHON:-/usr/bin/python3}

# npm dependencies and the sidecar build: one implementation, the one ComfyUI-Manager runs
# (install.py: idempotent, checks Node.js >= 20, stamps the build so the plugin can tell it is current)
if [ "$QUIET" = 1 ]; then "$PYTHON" install.py --quiet; else "$PYTHON" install.py; fi

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

if ! "$PYTHON" -c 'import aiohttp' 2>/dev/null; then
  apt_install python3-aiohttp
fi

if [ "$TEST" = 1 ]; then
  missing=()
  command -v chromium >/dev/null || missing+=(chromium)
  command -v oathtool >/dev/null || missing+=(oathtool)
  command -v zbarimg >/dev/null || missing+=(zbar-tools)
  # the shared store's suites start their own Redis and PostgreSQL (issue 28)
  [ -x /usr/bin/redis-server ] || missing+=(redis-server)
  compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || missing+=(postgresql)
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
