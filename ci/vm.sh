#!/usr/bin/env bash
# What the cgroup v2 tests need (issue 42; `link_harness_conformance::vm`): this machine's
# memory and pids controllers are cgroup v1 hierarchies, so those tests boot a Debian kernel
# under QEMU's software emulation. Pinned: QEMU 7.2 (whose package ships the C virtiofsd the
# tests share `/` with) and the kernel, its package checked by hash, put at target/vm/vmlinuz.
set -euo pipefail
cd "$(dirname "$0")/.."
qemu=1:7.2+dfsg-7+deb12u18+b3
kernel=linux-image-6.12.107+deb12-cloud-amd64-unsigned
kernel_version=6.12.107-1~deb12u1
kernel_sha256=752d15dbe0817b35ec227f352e226122ec6567bd47e7240c90e01e61a179baad
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if [ "$(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null || true)" != "$qemu" ]; then
  if ! apt-get install -y -qq --no-install-recommends "qemu-system-x86=$qemu" >/dev/null; then
    # A Debian point release replaces it: the archive's, saying so, until the pin is moved.
    echo "ci/vm.sh: qemu-system-x86=$qemu is gone from the archive; installing Debian's" >&2
    apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null
  fi
fi
if [ ! -f target/vm/vmlinuz ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  if (cd "$work" && apt-get download -qq "$kernel=$kernel_version"); then
    deb=$(echo "$work"/*.deb)
    echo "$kernel_sha256  $deb" | sha256sum --check --quiet
  else
    # Debian's security archive keeps only the newest build of a kernel: once this one is
    # superseded, take the newest 6.12 cloud kernel there is (apt checks its signature),
    # saying so, until the pin above is moved to it.
    newest=$(apt-cache search --names-only '^linux-image-6\.12\.[0-9.]+\+deb12-cloud-amd64-unsigned$' |
      cut -d' ' -f1 | sort -V | tail -1)
    [ -n "$newest" ] || { echo "ci/vm.sh: no 6.12 cloud kernel in apt's lists" >&2; exit 1; }
    echo "ci/vm.sh: $kernel=$kernel_version is gone from the archive; using $newest (not the pinned build)" >&2
    (cd "$work" && apt-get download -qq "$newest")
    kernel=$newest
    deb=$(echo "$work"/*.deb)
  fi
  dpkg-deb -x "$deb" "$work/x"
  mkdir -p target/vm
  cp "$work"/x/boot/vmlinuz-* target/vm/vmlinuz.part
  mv target/vm/vmlinuz.part target/vm/vmlinuz
fi
echo "ci/vm.sh: $(qemu-system-x86_64 --version | head -1); kernel: $(file -b target/vm/vmlinuz | grep -o 'version [^ ]*' || echo target/vm/vmlinuz)"
