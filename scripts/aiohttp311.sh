#!/usr/bin/env bash
# Makes aiohttp 3.11 (what ComfyUI requires) available to Debian bookworm's
# python3 WITHOUT installing it system-wide: the Debian trixie packages are
# downloaded with a private apt configuration and unpacked with dpkg -x into
# <repo>/.cache/aiohttp311/. The system's apt lists, cache and installed
# packages are left untouched.
#
# Prints, as its last line, the directory to put first on PYTHONPATH. Use it with
#   AIOHTTP_NO_EXTENSIONS=1 YARL_NO_EXTENSIONS=1 MULTIDICT_NO_EXTENSIONS=1 \
#   PROPCACHE_NO_EXTENSIONS=1 FROZENLIST_NO_EXTENSIONS=1
# (the packaged C extensions are built for another Python).
#
# Idempotent: exits 0 at once when the unpacked copy is already there and works.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${AUTHSVC_PYTHON:-/usr/bin/python3}"
CACHE="$ROOT/.cache/aiohttp311"
SITE="$CACHE/root/usr/lib/python3/dist-packages"
STAMP="$CACHE/.complete"
PACKAGES=(python3-aiohttp python3-yarl python3-multidict python3-propcache python3-frozenlist
  python3-aiosignal python3-aiohappyeyeballs python3-attr)

export AIOHTTP_NO_EXTENSIONS=1 YARL_NO_EXTENSIONS=1 MULTIDICT_NO_EXTENSIONS=1 \
  PROPCACHE_NO_EXTENSIONS=1 FROZENLIST_NO_EXTENSIONS=1
export DEBIAN_FRONTEND=noninteractive

version_ok() {
  local version
  version="$(PYTHONPATH="$SITE" "$PYTHON" -c 'import aiohttp; print(aiohttp.__version__)' 2>/dev/null)" || return 1
  [[ "$version" == 3.11.* ]]
}

if [[ -f "$STAMP" ]] && version_ok; then
  echo "$SITE"
  exit 0
fi

log() { echo "aiohttp311: $*" >&2; }

# Several test processes may ask at once: one builds, the others wait and reuse it.
mkdir -p "$ROOT/.cache"
exec 9>"$ROOT/.cache/aiohttp311.lock"
flock 9
if [[ -f "$STAMP" ]] && version_ok; then
  echo "$SITE"
  exit 0
fi

# Same archive and keyring as the machine's own apt sources, trixie suite.
URI="http://deb.debian.org/debian"
KEYRING="/usr/share/keyrings/debian-archive-keyring.gpg"
if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
  # first stanza's URIs and Signed-By (the main archive, listed first)
  found_uri="$(awk 'tolower($1)=="uris:" { print $2; exit }' /etc/apt/sources.list.d/debian.sources)"
  found_key="$(awk 'tolower($1)=="signed-by:" { print $2; exit }' /etc/apt/sources.list.d/debian.sources)"
  [[ -n "$found_uri" ]] && URI="$found_uri"
  [[ -n "$found_key" && -r "$found_key" ]] && KEYRING="$found_key"
fi

APT="$CACHE/apt"
rm -rf "$CACHE"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$CACHE/debs" "$CACHE/root"
cat >"$APT/trixie.sources" <<EOF
Types: deb
URIs: $URI
Suites: trixie
Components: main
Signed-By: $KEYRING
EOF

APT_OPTS=(
  -o "Dir::Etc::sourcelist=$APT/trixie.sources"
  -o "Dir::Etc::sourceparts=/nonexistent"
  -o "Dir::State::Lists=$APT/lists"
  -o "Dir::Cache=$APT/cache"
  -o "Dir::Cache::pkgcache="
  -o "Dir::Cache::srcpkgcache="
  -o "APT::Sandbox::User=root"
  -o "Acquire::Retries=3"
  -o "Acquire::Languages=none"
  -o "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false"
)

log "updating a private package list for trixie ($URI)"
apt-get "${APT_OPTS[@]}" -q update </dev/null >&2

log "downloading ${PACKAGES[*]}"
(cd "$CACHE/debs" && apt-get "${APT_OPTS[@]}" -q download "${PACKAGES[@]}" </dev/null >&2)

for deb in "$CACHE"/debs/*.deb; do
  dpkg -x "$deb" "$CACHE/root"
done

if ! version_ok; then
  log "unpacked, but python cannot import aiohttp 3.11 from $SITE:"
  PYTHONPATH="$SITE" "$PYTHON" -c 'import aiohttp; print(aiohttp.__version__)' >&2 || true
  exit 1
fi
rm -rf "$APT/lists" "$APT/cache"
touch "$STAMP"
log "aiohttp $(PYTHONPATH="$SITE" "$PYTHON" -c 'import aiohttp; print(aiohttp.__version__)') ready"
echo "$SITE"
