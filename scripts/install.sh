#!/usr/bin/env bash
# Builds stargz-store and installs it:
#   <prefix>/lib/stargz-store/        compiled store + production node_modules
#   <prefix>/bin/stargz-store         wrapper (the Go store's command line)
#   <prefix>/bin/stargz-store-helper  containers/image additional-layer-store-auth-helper
#   <unitdir>/stargz-store.service    systemd unit (paths rewritten for the prefix)
#   <sysconfdir>/stargz-store/config.toml   documented defaults (an existing file is kept)
#   <prefix>/share/stargz-store/      storage.conf / registries.conf snippets
#   <localstatedir>/lib/stargz-store/ state root, mountpoint (store/) and control socket (store.sock),
#                                     written into the unit, the snippets and the helper wrapper
# Idempotent: running it again replaces the program and keeps the configuration. It never starts the
# store; with systemd running it only reloads unit files (use --enable to enable and start it).
set -euo pipefail

usage() {
  cat <<USAGE
usage: scripts/install.sh [--prefix DIR] [--sysconfdir DIR] [--localstatedir DIR] [--unitdir DIR] [--no-build] [--enable]
  --prefix DIR      program location (default /usr/local)
  --sysconfdir DIR  configuration root (default /etc for /usr and /usr/local, else <prefix>/etc)
  --localstatedir DIR  state root: DIR/lib/stargz-store holds the cache, the mountpoint and the socket
                    (default /var for /usr and /usr/local, else <prefix>/var)
  --unitdir DIR     systemd unit directory (default <sysconfdir>/systemd/system)
  --no-build        install the existing dist/ (npm run build is skipped)
  --enable          with systemd running: systemctl enable --now stargz-store
USAGE
}

PREFIX=/usr/local
SYSCONFDIR=
LOCALSTATEDIR=
UNITDIR=
BUILD=1
ENABLE=0
while (($#)); do
  case $1 in
    --prefix) PREFIX=${2:?--prefix needs a directory}; shift 2 ;;
    --prefix=*) PREFIX=${1#*=}; shift ;;
    --sysconfdir) SYSCONFDIR=${2:?--sysconfdir needs a directory}; shift 2 ;;
    --sysconfdir=*) SYSCONFDIR=${1#*=}; shift ;;
    --localstatedir) LOCALSTATEDIR=${2:?--localstatedir needs a directory}; shift 2 ;;
    --localstatedir=*) LOCALSTATEDIR=${1#*=}; shift ;;
    --unitdir) UNITDIR=${2:?--unitdir needs a directory}; shift 2 ;;
    --unitdir=*) UNITDIR=${1#*=}; shift ;;
    --no-build) BUILD=0; shift ;;
    --enable) ENABLE=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "install.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done

abspath() { case $1 in /*) printf '%s\n' "${1%/}" ;; *) printf '%s/%s\n' "$PWD" "${1%/}" ;; esac; }
PREFIX=$(abspath "$PREFIX")
if [[ -z $SYSCONFDIR ]]; then
  case $PREFIX in /usr | /usr/local) SYSCONFDIR=/etc ;; *) SYSCONFDIR=$PREFIX/etc ;; esac
fi
SYSCONFDIR=$(abspath "$SYSCONFDIR")
if [[ -z $LOCALSTATEDIR ]]; then
  case $PREFIX in /usr | /usr/local) LOCALSTATEDIR=/var ;; *) LOCALSTATEDIR=$PREFIX/var ;; esac
fi
LOCALSTATEDIR=$(abspath "$LOCALSTATEDIR")
STATEDIR=$LOCALSTATEDIR/lib/stargz-store   # --root; the mountpoint and socket live inside it
UNITDIR=$(abspath "${UNITDIR:-$SYSCONFDIR/systemd/system}")

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIBDIR=$PREFIX/lib/stargz-store
BINDIR=$PREFIX/bin
SHAREDIR=$PREFIX/share/stargz-store
CONFDIR=$SYSCONFDIR/stargz-store

# The store runs on the Node pinned in package.json (node-linux-<arch>, installed by npm ci), never on
# whatever `node` is first on PATH: the wrappers below exec that binary by absolute path.
[[ -d $SRC/node_modules ]] || { echo "install.sh: run 'npm run setup' (npm ci on the pinned Node) in $SRC first" >&2; exit 1; }
[[ -x $SRC/node_modules/.bin/node ]] || {
  echo "install.sh: the pinned Node is missing ($SRC/node_modules/.bin/node): run 'npm run setup' in $SRC" >&2
  exit 1
}
command -v npm >/dev/null || { echo "install.sh: npm not found in PATH" >&2; exit 1; }

cd "$SRC"
if ((BUILD)); then
  echo "install.sh: building" >&2
  npm run --silent build
fi
for f in dist/src/cli/main.js dist/src/cli/helper-main.js bin/stargz-store.js bin/stargz-store-helper.js bin/node-options bin/store-env; do
  [[ -f $f ]] || { echo "install.sh: missing $SRC/$f (build failed?)" >&2; exit 1; }
done

# Stage a complete copy next to the target, then swap it in, so a failed run leaves the old install.
mkdir -p "$PREFIX/lib" "$BINDIR" "$SHAREDIR" "$CONFDIR" "$UNITDIR"
STAGE=$(mktemp -d "$PREFIX/lib/.stargz-store.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
cp -a package.json package-lock.json bin "$STAGE/"
mkdir -p "$STAGE/dist"
cp -a dist/src "$STAGE/dist/"
# copy the tree itself even when node_modules is a link (a worktree): the prune below must never
# reach the source checkout's own dependencies
mkdir "$STAGE/node_modules"
cp -a "$(readlink -f node_modules)/." "$STAGE/node_modules/"
# Drop dev dependencies (typescript, vitest, ...): removes files only, no network.
(cd "$STAGE" && npm prune --omit=dev --offline --no-audit --no-fund --silent >/dev/null && find node_modules -mindepth 1 -maxdepth 1 -type d -empty -delete)
chmod 0755 "$STAGE"
if [[ -e $LIBDIR ]]; then
  OLD=$(mktemp -d "$PREFIX/lib/.stargz-store-old.XXXXXX")
  mv "$LIBDIR" "$OLD/"
  mv "$STAGE" "$LIBDIR"
  rm -rf "$OLD"
else
  mv "$STAGE" "$LIBDIR"
fi
trap - EXIT

# Resolved after the move: the wrappers name the real binary inside the installed tree.
NODE=$(readlink -f "$LIBDIR/node_modules/.bin/node")
[[ -x $NODE ]] || { echo "install.sh: $LIBDIR/node_modules/.bin/node is missing after install" >&2; exit 1; }

write_wrapper() { # name entry
  local tmp
  tmp=$(mktemp "$BINDIR/.$1.XXXXXX")
  {
    printf '#!/bin/sh\n# Installed by stargz-store scripts/install.sh: runs on the Node installed with it.\n'
    # c/image runs the helper without arguments: give it this install's socket.
    [[ $1 == stargz-store-helper ]] && printf '[ "$#" -eq 0 ] && set -- "%s"\n' "$STATEDIR/store.sock"
    # the store runs with the V8 options of bin/node-options (as bin/stargz-store does)
    local opts=''
    if [[ $1 == stargz-store ]]; then
      # sed, not grep: a file of comments only must not end the install (set -e, pipefail)
      opts="$(sed '/^#/d;/^$/d' "$LIBDIR/bin/node-options" | tr '\n' ' ')"
      # and the environment of bin/store-env, each NAME=value exported as one literal word
      sed "/^#/d;/^\$/d;s/'/'\\\\''/g;s/^/export '/;s/\$/'/" "$LIBDIR/bin/store-env"
      echo # a last line without its newline must not run into the exec line
    fi
    printf 'exec "%s" %s"%s/bin/%s" "$@"\n' "$NODE" "$opts" "$LIBDIR" "$2"
  } >"$tmp"
  chmod 0755 "$tmp"
  mv -f "$tmp" "$BINDIR/$1"
}
write_wrapper stargz-store stargz-store.js
write_wrapper stargz-store-helper stargz-store-helper.js

# Every path in the unit: program, config, state root, mountpoint, socket (the last three share
# /var/lib/stargz-store in the shipped unit).
rewrite() {
  sed -e "s#/usr/local/bin/stargz-store#$BINDIR/stargz-store#g" \
    -e "s#/etc/stargz-store/config.toml#$CONFDIR/config.toml#g" \
    -e "s#/var/lib/stargz-store#$STATEDIR#g" "$@"
}
rewrite systemd/stargz-store.service >"$UNITDIR/.stargz-store.service.tmp"
mv -f "$UNITDIR/.stargz-store.service.tmp" "$UNITDIR/stargz-store.service"
chmod 0644 "$UNITDIR/stargz-store.service"

if [[ ! -e $CONFDIR/config.toml ]]; then
  install -m 0644 systemd/config.toml "$CONFDIR/config.toml"
  echo "install.sh: wrote $CONFDIR/config.toml" >&2
else
  echo "install.sh: kept existing $CONFDIR/config.toml" >&2
fi
install -m 0644 systemd/registries.conf.snippet systemd/config.toml "$SHAREDIR/"
rewrite systemd/storage.conf.snippet >"$SHAREDIR/storage.conf.snippet"
chmod 0644 "$SHAREDIR/storage.conf.snippet"

echo "install.sh: installed $BINDIR/stargz-store and $BINDIR/stargz-store-helper (node $("$NODE" --version))" >&2
echo "install.sh: unit $UNITDIR/stargz-store.service (mountpoint $STATEDIR/store, root $STATEDIR, socket $STATEDIR/store.sock)" >&2
if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
  if [[ $UNITDIR == /etc/systemd/system || $UNITDIR == /usr/lib/systemd/system || $UNITDIR == /lib/systemd/system ]]; then
    systemctl daemon-reload
    if ((ENABLE)); then
      systemctl enable --now stargz-store.service
    else
      echo "install.sh: start it with: systemctl enable --now stargz-store" >&2
    fi
  fi
else
  echo "install.sh: systemd is not running; nothing started. Run the store by hand:" >&2
  echo "  $BINDIR/stargz-store --config=$CONFDIR/config.toml --root=$STATEDIR --addr=$STATEDIR/store.sock $STATEDIR/store" >&2
fi
cat >&2 <<NEXT
install.sh: then point Podman/CRI-O at it:
  /etc/containers/storage.conf    <- $SHAREDIR/storage.conf.snippet
  /etc/containers/registries.conf <- $SHAREDIR/registries.conf.snippet (Podman >= 5.2, CRI-O)
NEXT
