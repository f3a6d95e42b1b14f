#!/bin/bash
# Re-measure this store against the Go stargz-store v0.12 (issue 10 / 11): start-up of the large image
# (its own entrypoint) and model-load (reads a whole model shard at start), full pull vs lazy (ours)
# vs lazy (Go), on loopback and the shaped 100 Mbit/s, 30 ms link. Builds the Go store if missing
# (shared/lab/build-go-store.sh, ~3 min), builds this repo, runs the harness, prints the tables.
#
#   bash bench/compare-go.sh            # or: npm run bench:go
#   SCALE=1 ITERATIONS=3 bash bench/compare-go.sh
#
# Environment: SCALE (0.3), ITERATIONS (2), NETWORKS (loopback,100mbit-30ms), WORKLOAD
# (startup,model-load), GO_STORE (/tmp/lab/go/stargz-store), LAB (../shared/lab beside the repo),
# STORE_CONFIG (the lab's go-baseline/config.toml, given to both stores as in issue 10),
# WORK_DIR (/tmp/sgzb: cached images; <= 31 characters), OUT (bench/out/compare-go).
# Needs root, Podman, skopeo, docker-registry (scripts/install-deps.sh). Results: $OUT/results.md
# (all tables), results.json (every iteration), chart.svg.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
LAB=${LAB:-$(cd "$REPO/.." && pwd)/shared/lab}
GO_STORE=${GO_STORE:-/tmp/lab/go/stargz-store}
STORE_CONFIG=${STORE_CONFIG:-$LAB/go-baseline/config.toml}
SCALE=${SCALE:-0.3}
ITERATIONS=${ITERATIONS:-2}
NETWORKS=${NETWORKS:-loopback,100mbit-30ms}
WORKLOAD=${WORKLOAD:-startup,model-load}
WORK_DIR=${WORK_DIR:-/tmp/sgzb}
OUT=${OUT:-$REPO/bench/out/compare-go}
MODES=full-gzip,lazy-estargz,lazy-esgz-opt,lazy-zstd-chunked,baseline-estargz,baseline-esgz-opt,baseline-zstd-chunked

if [ ! -x "$GO_STORE" ]; then
  [ -f "$LAB/build-go-store.sh" ] || { echo "compare-go: $GO_STORE missing and no $LAB/build-go-store.sh (set GO_STORE or LAB)" >&2; exit 1; }
  echo "compare-go: building the Go stargz-store (~3 min)"
  OUTDIR=$(dirname "$GO_STORE") bash "$LAB/build-go-store.sh"
fi
[ -f "$STORE_CONFIG" ] || { echo "compare-go: config $STORE_CONFIG not found (set STORE_CONFIG)" >&2; exit 1; }

cd "$REPO"
npm run build --silent
start=$(date +%s)
node dist/bench/harness/main.js --images large --scale "$SCALE" --iterations "$ITERATIONS" \
  --networks "$NETWORKS" --modes "$MODES" --workload "$WORKLOAD" --resolve-probe \
  --baseline-store "$GO_STORE" --baseline-flavour go --store-config "$STORE_CONFIG" \
  --work-dir "$WORK_DIR" --out "$OUT"
end=$(date +%s)

# the issue-shaped tables: ours vs Go per format, the model-load read rates, the issues' targets
echo
awk '/^## /{p = /^## (Ours vs the baseline store|Model load|Targets \(issues 10 and 11\)|Failures)/} p' "$OUT/results.md"
echo "compare-go: $((end - start)) s of benchmark; all tables in $OUT/results.md"
