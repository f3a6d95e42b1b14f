#!/bin/bash
# Peak RSS of our store with every lazy layer of the harness's large image mounted (issue 10:
# "peak RSS <= 150 MB ... with 10 large layers mounted"): eStargz, optimised eStargz and
# zstd:chunked, 3 layers each (9 layers, 1.4 GB compressed at scale 0.3), plus the lazy layers of
# any further harness builds named in EXTRA_WORK_DIRS (another --seed gives other model layers).
# Resolves every layer's diff, reads nothing, then samples RSS while the background fetch verifies
# all of them.
#
#   bash bench/mounted-layers.sh            # after a harness run (npm run bench:go) filled WORK_DIR
#   # 10 distinct large layers: a second build whose model layer differs, then both
#   node dist/bench/harness/main.js --images large --scale 0.3 --seed 43 --modes lazy-zstd-chunked \
#     --build-only --iterations 1 --networks loopback --work-dir /tmp/sgzb43 --out /tmp/sgzb43/out
#   EXTRA_WORK_DIRS=/tmp/sgzb43 LAYERS=10 bash bench/mounted-layers.sh
#
# Environment: WORK_DIR (/tmp/sgzb: the harness's registry data), EXTRA_WORK_DIRS (none),
# LAYERS (resolve at most this many; default all), RSS_PARTS (1: also print what the peak sample was
# made of, bench/lib/rss-parts.ts), SECONDS_AFTER (60), PORT (5099; the extra registries take the
# ports after it), STORE_CONFIG (the lab's go-baseline/config.toml), STORE_BIN (bin/stargz-store).
# Needs root, FUSE and docker-registry.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK_DIR=${WORK_DIR:-/tmp/sgzb}
EXTRA_WORK_DIRS=${EXTRA_WORK_DIRS:-}
PORT=${PORT:-5099}
SECONDS_AFTER=${SECONDS_AFTER:-60}
LAYERS=${LAYERS:-1000000}
STORE_CONFIG=${STORE_CONFIG:-$(cd "$REPO/.." && pwd)/shared/lab/go-baseline/config.toml}
STORE_BIN=${STORE_BIN:-$REPO/bin/stargz-store}
for w in "$WORK_DIR" $EXTRA_WORK_DIRS; do
  [ -d "$w/registry/data/docker/registry/v2/repositories/bench/large/_manifests/tags" ] ||
    { echo "mounted-layers: no harness registry data in $w/registry/data (run npm run bench:go first)" >&2; exit 1; }
done
TMP=$(mktemp -d /tmp/sgz-mounted.XXXXXX)
rpids=()
port=$PORT
for w in "$WORK_DIR" $EXTRA_WORK_DIRS; do
  cat >"$TMP/registry-$port.yml" <<YML
version: 0.1
log: { level: warn }
storage: { filesystem: { rootdirectory: $w/registry/data } }
http: { addr: 127.0.0.1:$port }
YML
  docker-registry serve "$TMP/registry-$port.yml" >"$TMP/registry-$port.log" 2>&1 &
  rpids+=($!)
  port=$((port + 1))
done
spid=
cleanup() {
  [ -n "$spid" ] && kill -INT "$spid" 2>/dev/null && wait "$spid" 2>/dev/null || true
  for p in "${rpids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
for ((p = PORT; p < port; p++)); do
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$p/v2/" >/dev/null && break; sleep 0.1; done
done
mkdir -p "$TMP/mnt"
"$STORE_BIN" --config "$STORE_CONFIG" --root "$TMP/root" --addr "$TMP/store.sock" "$TMP/mnt" >"$TMP/store.log" 2>&1 &
spid=$!
for _ in $(seq 100); do mount | grep -q " $TMP/mnt " && break; sleep 0.1; done
if [ "${RSS_PARTS:-0}" = 1 ]; then
  # samples smaps until the store exits (at the end of this script), then prints the peak's parts
  "$REPO/node_modules/.bin/node" --input-type=module -e "
    const { sampleRssParts, formatParts } = await import('$REPO/dist/bench/lib/rss-parts.js');
    const s = sampleRssParts($spid, 200);
    process.on('SIGTERM', async () => { await s.stop(); console.log('mounted-layers: peak sample, MB: ' + formatParts(s.peak())); process.exit(0); });
    setInterval(() => {}, 1000);
  " &
  sampler=$!
fi
n=0
declare -A distinct=()
for ((p = PORT; p < port && n < LAYERS; p++)); do
  tags=$(curl -sf "http://127.0.0.1:$p/v2/bench/large/tags/list" |
    python3 -c 'import json,sys; print(" ".join(t for t in json.load(sys.stdin)["tags"] if t in ("estargz", "esgz-opt", "zstd-chunked")))')
  for tag in $tags; do
    ref=$(printf '127.0.0.1:%s/bench/large:%s' "$p" "$tag" | base64 -w0)
    for d in $(curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
      "http://127.0.0.1:$p/v2/bench/large/manifests/$tag" |
      python3 -c 'import json,sys; print(" ".join(l["digest"] for l in json.load(sys.stdin)["layers"]))'); do
      [ "$n" -lt "$LAYERS" ] || break
      stat "$TMP/mnt/$ref/$d/diff" >/dev/null
      n=$((n + 1))
      distinct[$d]=1
    done
  done
done
mb() { awk -v k="$1" '$1 == k":" {printf "%.0f", $2 / 1024}' "/proc/$spid/status"; }
echo "mounted-layers: $n layers resolved (${#distinct[@]} distinct blobs); peak RSS so far $(mb VmHWM) MB"
for t in $(seq 10 10 "$SECONDS_AFTER"); do
  sleep 10
  echo "mounted-layers: t=${t}s RSS $(mb VmRSS) MB, peak $(mb VmHWM) MB"
done
"$STORE_BIN" status --addr "$TMP/store.sock" | awk 'NR == 1 || /large/'
if [ -n "${sampler:-}" ]; then kill -TERM "$sampler" && wait "$sampler" || true; fi
