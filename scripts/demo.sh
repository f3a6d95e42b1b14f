#!/usr/bin/env bash
# One-command demo on a fresh Debian bookworm machine (as root):
#   installs system packages and npm dependencies, builds, starts a local registry, pushes a lazy
#   (eStargz) image built by our writer, starts the store with its default configuration and runs a
#   container through it with Podman. Everything lives under $DEMO_DIR (default /tmp/stargz-demo); the
#   system's /etc/containers and /var/lib/stargz-store are left alone. Cleans up on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO_DIR=$PWD
DEMO_DIR=${DEMO_DIR:-/tmp/stargz-demo}
PORT=${DEMO_REGISTRY_PORT:-5055}
REG=127.0.0.1:$PORT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Installing system packages (apt) and npm dependencies"
bash scripts/install-deps.sh --all
if [[ ! -d node_modules/fuse-native || ! -x node_modules/.bin/node ]]; then bash scripts/npm-ci.sh --no-audit --no-fund; fi
# The pinned Node 24 (node-linux-<arch>), whatever node the system has.
NODE=$PWD/node_modules/.bin/node
npm run build >/dev/null

rm -rf "$DEMO_DIR"
mkdir -p "$DEMO_DIR"/{registry,root,store,storage,runroot,tmp,conf,data}
pids=()
cleanup() {
  set +e
  say "Cleaning up"
  if [[ -n ${STORE_PID:-} ]]; then kill -TERM "$STORE_PID" 2>/dev/null; wait "$STORE_PID" 2>/dev/null; fi
  podman_env system reset -f >/dev/null 2>&1
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  fusermount -u "$DEMO_DIR/store" 2>/dev/null
  rm -rf "$DEMO_DIR"
}
trap cleanup EXIT

say "Starting a local registry on $REG"
cat >"$DEMO_DIR/registry/config.yml" <<YAML
version: 0.1
log: { level: warn }
storage: { filesystem: { rootdirectory: $DEMO_DIR/registry/data } }
http: { addr: $REG }
YAML
/usr/bin/docker-registry serve "$DEMO_DIR/registry/config.yml" >"$DEMO_DIR/registry/log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -fsS "http://$REG/v2/" >/dev/null 2>&1 && break; sleep 0.1; done

say "Building a 64 MiB eStargz image with our writer and pushing it"
head -c $((64 << 20)) /dev/urandom >"$DEMO_DIR/data/weights.bin"
echo "hello from a lazily pulled layer" >"$DEMO_DIR/data/hello.txt"
"$NODE" dist/bench/lib/busybox-image.js --registry "$REG" --repo demo/app --tag estargz --format estargz \
  --file "$DEMO_DIR/data/hello.txt:/data/hello.txt" --file "$DEMO_DIR/data/weights.bin:/data/weights.bin" \
  --cmd '["/bin/cat","/data/hello.txt"]' | tee "$DEMO_DIR/image.json"

say "Starting the store (default config) at $DEMO_DIR/store"
bin/stargz-store --log-level info --root "$DEMO_DIR/root" --addr "$DEMO_DIR/store.sock" \
  "$DEMO_DIR/store" 2>"$DEMO_DIR/store.log" &
STORE_PID=$!
for _ in $(seq 100); do grep -q " $DEMO_DIR/store fuse" /proc/mounts && break; sleep 0.1; done
grep " $DEMO_DIR/store " /proc/mounts

cat >"$DEMO_DIR/conf/storage.conf" <<TOML
[storage]
driver = "overlay"
graphroot = "$DEMO_DIR/storage"
runroot = "$DEMO_DIR/runroot"
[storage.options]
additionallayerstores = ["$DEMO_DIR/store:ref"]
[storage.options.overlay]
mountopt = "nodev"
TOML
cat >"$DEMO_DIR/conf/containers.conf" <<TOML
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
netns = "none"
log_driver = "k8s-file"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$DEMO_DIR/events.log"
runtime = "runc"
tmp_dir = "$DEMO_DIR/tmp"
TOML
cat >"$DEMO_DIR/conf/registries.conf" <<TOML
unqualified-search-registries = []
[[registry]]
location = "$REG"
insecure = true
TOML
podman_env() {
  CONTAINERS_STORAGE_CONF="$DEMO_DIR/conf/storage.conf" CONTAINERS_CONF="$DEMO_DIR/conf/containers.conf" \
    CONTAINERS_REGISTRIES_CONF="$DEMO_DIR/conf/registries.conf" podman "$@"
}

say "podman pull (lazy layers are taken from the store: no blob download)"
time podman_env pull "$REG/demo/app:estargz"

say "podman run"
time podman_env run --rm "$REG/demo/app:estargz"

say "Store status"
bin/stargz-store status --addr "$DEMO_DIR/store.sock"
echo
echo "Registry blob traffic (the store fetched on demand, then prefetched the rest in the background):"
awk '/GET \/v2\/.*\/blobs\// { for (i = 1; i < NF; i++) if ($i ~ /^20[06]$/) { n++; b += $(i + 1); break } }
  END { printf "%d requests, %.1f MB\n", n, b / 1e6 }' "$DEMO_DIR/registry/log"
say "Demo finished"
