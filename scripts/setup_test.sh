#!/usr/bin/env bash
# Test set-up, run by scripts/test.sh (so `scripts/test.sh` alone sets up a fresh Debian 12
# machine): the run-time packages (scripts/setup.sh --no-build), then the Debian packages only
# the tests use, then the Python venv of the test oracles (.venv, pinned in
# tests/requirements.txt). Idempotent: what is present is kept. Run as root (or with sudo).
#
#   scripts/setup_test.sh           install what is missing
#   scripts/setup_test.sh --list    print the test-only Debian package list
#   scripts/setup_test.sh --services  print the services it keeps disabled at boot
#
# Services: munge, slurmd, slurmctld and prometheus are installed for the tests, which start
# private instances themselves (tests/slurm/slurm_lib.sh, tests/metrics/test_prometheus.sh) and
# stop them on exit. apt-get runs under a policy-rc.d that refuses every start (unless the
# machine has one already), and each unit is then disabled (systemd links and SysV start links
# removed), so nothing runs at boot; tests/scripts/test_setup_split.sh checks both.
#
# The venv is isolated from Debian's site-packages (Debian's python3-torch 1.13 must not shadow
# PyPI's torch 2.x) and is installed with --no-deps from the full pinned closure, which leaves out
# torch's GPU-only nvidia-* / cuda-* / triton wheels (about 3 GB). A .venv made by an earlier
# setup.sh over Debian's site-packages is recreated; a .venv that is a symbolic link (a shared
# venv) is used as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS=(clang clang-format libclang-rt-14-dev libomp-dev python3-venv sentencepiece curl procps
      iproute2 iputils-ping iperf3 libxml2-utils prometheus slurm-wlm slurmd slurmctld munge
      libpmix-dev chromium)
SERVICES=(munge slurmd slurmctld prometheus)
case "${1:-}" in
    --list) printf '%s\n' "${PKGS[@]}"; exit 0 ;;
    --services) printf '%s\n' "${SERVICES[@]}"; exit 0 ;;
    "") ;;
    *) echo "usage: $0 [--list|--services]" >&2; exit 2 ;;
esac
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
scripts/setup.sh --no-build

missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" > /dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\n# scripts/setup_test.sh: no service starts during its apt-get\nexit 101\n' |
            $SUDO tee "$policy" > /dev/null
        $SUDO chmod 755 "$policy"
    fi
    rc=0
    $SUDO apt-get update -q &&
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
            "${missing[@]}" || rc=$?
    [ -z "$policy" ] || $SUDO rm -f "$policy"
    [ "$rc" = 0 ] || exit "$rc"
fi
# Nothing at boot: remove the links the packages' maintainer scripts made (also on a machine set
# up by an earlier setup.sh, which enabled them).
for s in "${SERVICES[@]}"; do
    if [ -f "/lib/systemd/system/$s.service" ]; then
        $SUDO systemctl disable --quiet "$s.service" > /dev/null 2>&1 || true
        $SUDO rm -f /etc/systemd/system/*.wants/"$s.service"
    fi
    if ls /etc/rc[0-6S].d/S[0-9][0-9]"$s" > /dev/null 2>&1; then
        $SUDO update-rc.d -f "$s" remove > /dev/null 2>&1 || $SUDO rm -f /etc/rc[0-6S].d/S[0-9][0-9]"$s"
    fi
done

# The oracles' venv.
REQ=tests/requirements.txt STAMP=.venv/shardlm-requirements.txt
if [ -L .venv ]; then
    echo "setup_test: .venv is a link to $(readlink .venv): used as it is"
elif ! cmp -s "$REQ" "$STAMP" 2> /dev/null; then
    if [ ! -x .venv/bin/python ] || grep -qi '^include-system-site-packages *= *true' .venv/pyvenv.cfg; then
        /usr/bin/python3 -m venv --clear .venv
    fi
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q --no-deps -r "$REQ"
    cp "$REQ" "$STAMP"
fi
