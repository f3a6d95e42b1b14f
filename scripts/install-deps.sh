#!/usr/bin/env bash
# System packages (Debian bookworm, as root), in two sets:
#   (default)  what the store needs at run time on a node: libfuse2 (loaded by fuse-native) and fuse
#              (fusermount, to unmount). Nothing here ships a service: a node gets no registry,
#              containerd or other daemon from this script.
#   --all      plus what the tests, the demo and the benchmarks use (a local docker-registry, Podman,
#              containerd + ctr-remote, skopeo, debootstrap, ...). Their packages' maintainer scripts
#              would enable and start docker-registry.service (:5000 on every interface, no auth) and
#              containerd.service: while installing, a policy-rc.d refuses every service start.
#   --print    print the package list of the chosen set and exit.
# Idempotent and non-interactive; fails loudly when a component of the set is still missing afterwards.
set -euo pipefail

RUNTIME_PKGS=(
  libfuse2 fuse            # fuse-native loads libfuse2; fusermount for unmount
)
DEV_PKGS=(
  docker-registry          # real registry for integration tests (distribution 2.8)
  podman runc conmon catatonit containernetworking-plugins uidmap iptables
  debootstrap              # benchmark workloads (Debian rootfs images)
  skopeo                   # copies OCI layouts built by our writer into the registry
  busybox-static           # tiny runnable images
  stargz-snapshotter containerd   # ctr-remote, the Go eStargz converter (reference blobs)
  apache2-utils            # htpasswd (bcrypt) for registry basic-auth tests
  python3                  # sd_notify sender (Node has no unix datagram sockets)
  zstd jq curl openssl ca-certificates strace procps iproute2 e2fsprogs binutils   # binutils: readelf
)
RUNTIME_BINS=(/usr/bin/fusermount)
DEV_BINS=(/usr/bin/docker-registry /usr/bin/podman /usr/sbin/runc /usr/bin/skopeo /bin/busybox /usr/bin/ctr-remote
  /usr/bin/containerd /usr/bin/zstd /usr/bin/openssl /usr/bin/htpasswd /usr/bin/readelf /usr/bin/strace /usr/sbin/tc
  /usr/bin/python3 /usr/sbin/debootstrap)

ALL=0
PRINT=0
for a in "$@"; do
  case $a in
    --all) ALL=1 ;;
    --print) PRINT=1 ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps: unknown argument $a (expected --all, --print)" >&2; exit 2 ;;
  esac
done

PKGS=("${RUNTIME_PKGS[@]}")
BINS=("${RUNTIME_BINS[@]}")
if ((ALL)); then
  PKGS+=("${DEV_PKGS[@]}")
  BINS+=("${DEV_BINS[@]}")
fi
if ((PRINT)); then
  printf '%s\n' "${PKGS[@]}"
  exit 0
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Debian's invoke-rc.d / deb-systemd-invoke ask policy-rc.d before starting a service; 101 = refuse.
  # An operator's own policy-rc.d is left as it is.
  POLICY=${INSTALL_DEPS_POLICY_RC_D:-/usr/sbin/policy-rc.d}
  if [[ ! -e $POLICY ]]; then
    trap 'rm -f "$POLICY"' EXIT
    printf '#!/bin/sh\n# written by stargz-store scripts/install-deps.sh while it installs packages\nexit 101\n' >"$POLICY"
    chmod 0755 "$POLICY"
  fi
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

fail=0
for bin in "${BINS[@]}"; do
  if [[ ! -x $bin ]]; then
    echo "install-deps: MISSING $bin" >&2
    fail=1
  fi
done
ls /usr/lib/*-linux-gnu/libfuse.so.2* >/dev/null 2>&1 || { echo "install-deps: MISSING libfuse.so.2" >&2; fail=1; }
[[ -c /dev/fuse ]] || { echo "install-deps: MISSING /dev/fuse" >&2; fail=1; }
exit $fail
