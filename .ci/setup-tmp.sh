#!/usr/bin/env bash
# CI for airlock: runs on a fresh clone as root (2 cores). It installs what
# the tests need, checks formatting, vet and staticcheck, builds for darwin
# (the portable packages), builds the three static binaries, runs
# the README's test command in strict mode (a missing kernel feature fails
# instead of skipping), the benchmark module's checks (bench/ is its own Go
# module, which ./... leaves out), the README's test command again as an
# unprivileged user, and each fuzz target for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH 2>/dev/null || echo /root/go)/bin"
export AIRLOCK_TEST_STRICT=1
export GOFLAGS=-mod=mod

step() { printf '\n== %s ==\n' "$*"; }

step "install test dependencies"
need=()
[ -x /usr/bin/python3 ] || need+=(python3)
[ -x /usr/bin/curl ] || need+=(curl)
[ -x /usr/bin/git ] || need+=(git)                                  # e2e: git clone through the proxy
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip) # e2e: pip install through the proxy
[ -x /usr/bin/npm ] || need+=(npm)                                  # e2e: npm install through the proxy
command -v setpriv >/dev/null || need+=(util-linux)
[ -x /usr/sbin/runc ] || need+=(runc)
[ -x /usr/bin/crun ] || need+=(crun)
[ -x /usr/bin/podman ] || need+=(podman) # e2e: airlock inside containers
[ -x /usr/bin/runsc ] || need+=(runsc)   # isolation gvisor: the attack tests and the CSV example under gVisor
[ -x /usr/bin/qemu-system-x86_64 ] || need+=(qemu-system-x86) # isolation microvm: the VMM (microvm machine, TCG)
command -v bwrap >/dev/null || need+=(bubblewrap) # the bench module's parity test
command -v debootstrap >/dev/null || need+=(debootstrap) # the environment tests' Debian root (.ci/rootfs)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
# isolation microvm: a guest kernel whose module tree has 9p (linux-image-cloud-amd64 has none), without
# its recommends (firmware, apparmor); airlock extracts the kernel and builds the guest's initramfs from
# it once per airlock-init, cached in /var/cache/airlock/microvm
if ! compgen -G '/lib/modules/*/kernel/fs/9p/9p.ko' >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends linux-image-amd64
fi

step "the environment tests' Debian root (debootstrap, cached)"
AIRLOCK_TEST_ROOTFS=$(.ci/rootfs)
export AIRLOCK_TEST_ROOTFS
echo "AIRLOCK_TEST_ROOTFS=$AIRLOCK_TEST_ROOTFS"

step "Kubernetes for the tests: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kubelet built from k8s.io/kubernetes once (cached); etcd, containerd and runc from Debian"
AIRLOCK_TEST_K8S=$(.ci/k8s)
export AIRLOCK_TEST_K8S
echo "AIRLOCK_TEST_K8S=$AIRLOCK_TEST_K8S"
echo "export AIRLOCK_TEST_ROOTFS=$AIRLOCK_TEST_ROOTFS AIRLOCK_TEST_K8S=$AIRLOCK_TEST_K8S" > /tmp/ci-env.sh
