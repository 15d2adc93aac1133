#!/usr/bin/env bash
# Installs what Link needs from the system on a fresh Debian machine:
# bubblewrap (confinement), strace (the traced runtime pass).
set -euo pipefail
if command -v bwrap >/dev/null && command -v strace >/dev/null; then
    echo "ci: bubblewrap and strace already installed"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq bubblewrap strace
