#!/bin/bash
# Peak RSS of our store with every lazy layer of the harness's large image mounted (issue 10:
# "peak RSS <= 150 MB ... with 10 large layers mounted"): eStargz, optimised eStargz and
# zstd:chunked, 3 layers each (9 layers, 1.4 GB compressed at scale 0.3). Resolves every layer's
# diff, reads nothing, then samples RSS while the background fetch verifies all of them.
#
#   bash bench/mounted-layers.sh            # after a harness run (npm run bench:go) filled WORK_DIR
#
# Environment: WORK_DIR (/tmp/sgzb: the harness's registry data), SECONDS_AFTER (60), PORT (5099),
# STORE_CONFIG (the lab's go-baseline/config.toml). Needs root, FUSE and docker-registry.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK_DIR=${WORK_DIR:-/tmp/sgzb}
PORT=${PORT:-5099}
SECONDS_AFTER=${SECONDS_AFTER:-60}
STORE_CONFIG=${STORE_CONFIG:-$(cd "$REPO/.." && pwd)/shared/lab/go-baseline/config.toml}
DATA=$WORK_DIR/registry/data
TAGS=$DATA/docker/registry/v2/repositories/bench/large/_manifests/tags
[ -d "$TAGS" ] || { echo "mounted-layers: no harness registry data in $DATA (run npm run bench:go first)" >&2; exit 1; }
TMP=$(mktemp -d /tmp/sgz-mounted.XXXXXX)
cat >"$TMP/registry.yml" <<YML
version: 0.1
log: { level: warn }
storage: { filesystem: { rootdirectory: $DATA } }
http: { addr: 127.0.0.1:$PORT }
YML
docker-registry serve "$TMP/registry.yml" >"$TMP/registry.log" 2>&1 &
rpid=$!
spid=
cleanup() {
  [ -n "$spid" ] && kill -INT "$spid" 2>/dev/null && wait "$spid" 2>/dev/null || true
  kill "$rpid" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/v2/" >/dev/null && break; sleep 0.1; done
mkdir -p "$TMP/mnt"
"$REPO/bin/stargz-store" --config "$STORE_CONFIG" --root "$TMP/root" --addr "$TMP/store.sock" "$TMP/mnt" >"$TMP/store.log" 2>&1 &
spid=$!
for _ in $(seq 100); do mount | grep -q " $TMP/mnt " && break; sleep 0.1; done
n=0
for tag in estargz esgz-opt zstd-chunked; do
  ref=$(printf '127.0.0.1:%s/bench/large:%s' "$PORT" "$tag" | base64 -w0)
  for d in $(curl -sf -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    "http://127.0.0.1:$PORT/v2/bench/large/manifests/$tag" |
    python3 -c 'import json,sys; print(" ".join(l["digest"] for l in json.load(sys.stdin)["layers"]))'); do
    stat "$TMP/mnt/$ref/$d/diff" >/dev/null
    n=$((n + 1))
  done
done
mb() { awk -v k="$1" '$1 == k":" {printf "%.0f", $2 / 1024}' "/proc/$spid/status"; }
echo "mounted-layers: $n layers resolved; peak RSS so far $(mb VmHWM) MB"
for t in $(seq 10 10 "$SECONDS_AFTER"); do
  sleep 10
  echo "mounted-layers: t=${t}s RSS $(mb VmRSS) MB, peak $(mb VmHWM) MB"
done
"$REPO/bin/stargz-store" status --addr "$TMP/store.sock" | awk 'NR == 1 || /large/'
