#!/usr/bin/env bash
# Run-time vs test set-up (issue 20, item 14). The package arrays are read from the scripts' text
# (PKGS=( ... )), not by running them. Checks:
#   - scripts/setup.sh's list holds none of scripts/setup_test.sh's packages, nor any package
#     known to be test-only (the PyTorch / SentencePiece oracles, the services, Chromium, clang);
#   - scripts/setup.sh makes no Python venv and installs nothing from PyPI;
#   - on this machine (set up by scripts/test.sh -> scripts/setup_test.sh), no test service has a
#     systemd link in /etc/systemd/system/*.wants/ or a SysV start link in /etc/rc?.d/.
. "$(dirname "$0")/../lib.sh"
pkgs_of() { # FILE -> its PKGS array, one per line
    [ -f "$1" ] || return 0
    bash -c "$(sed -n '/^PKGS=(/,/)/p' "$1")"'; printf "%s\n" "${PKGS[@]}"'
}
RUNTIME=$(pkgs_of "$SRC/scripts/setup.sh")
[ -n "$RUNTIME" ] && ok "setup.sh lists $(wc -l <<< "$RUNTIME") packages" || bad "no PKGS in setup.sh"
KNOWN="python3-torch python3-sentencepiece python3-numpy sentencepiece prometheus slurm-wlm slurmd
slurmctld munge chromium clang clang-format libclang-rt-14-dev libpmix-dev iperf3"
TESTONLY=$(printf '%s\n' $KNOWN; pkgs_of "$SRC/scripts/setup_test.sh")
[ -f "$SRC/scripts/setup_test.sh" ] && ok "scripts/setup_test.sh exists" ||
    bad "scripts/setup_test.sh missing"
both=$(comm -12 <(sort -u <<< "$RUNTIME") <(sort -u <<< "$TESTONLY") | tr '\n' ' ')
[ -z "$both" ] && ok "run-time list has no test-only package" ||
    bad "run-time list (scripts/setup.sh) has test-only packages: $both"
if grep -Eq 'pip install|-m venv' "$SRC/scripts/setup.sh"; then
    bad "scripts/setup.sh makes a venv / installs from PyPI"
else
    ok "scripts/setup.sh installs nothing from PyPI"
fi
SERVICES="munge slurmd slurmctld prometheus"
[ -f "$SRC/scripts/setup_test.sh" ] && SERVICES+=" $(bash "$SRC/scripts/setup_test.sh" --services)"
for s in $(printf '%s\n' $SERVICES | sort -u); do
    links=$(ls /etc/systemd/system/*.wants/"$s.service" /etc/rc[0-6S].d/S[0-9][0-9]"$s" 2> /dev/null |
        tr '\n' ' ' || true)
    [ -z "$links" ] && ok "$s: not enabled at boot" || bad "$s enabled at boot: $links"
done
slm_finish
