#!/usr/bin/env bash
# Installs every system component the store, its tests and its demo use (Debian bookworm, as root).
# Idempotent and non-interactive; fails loudly when a component is still missing afterwards.
set -euo pipefail

PKGS=(
  libfuse2 fuse            # fuse-native loads libfuse2; fusermount for unmount
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
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

fail=0
for bin in /usr/bin/docker-registry /usr/bin/podman /usr/sbin/runc /usr/bin/skopeo /usr/bin/fusermount \
  /bin/busybox /usr/bin/ctr-remote /usr/bin/containerd /usr/bin/zstd /usr/bin/openssl /usr/bin/htpasswd /usr/bin/readelf /usr/bin/strace /usr/sbin/tc /usr/bin/python3 /usr/sbin/debootstrap; do
  if [[ ! -x $bin ]]; then
    echo "install-deps: MISSING $bin" >&2
    fail=1
  fi
done
ls /usr/lib/x86_64-linux-gnu/libfuse.so.2* >/dev/null 2>&1 || { echo "install-deps: MISSING libfuse.so.2" >&2; fail=1; }
[[ -c /dev/fuse ]] || { echo "install-deps: MISSING /dev/fuse" >&2; fail=1; }
exit $fail
