#!/usr/bin/env bash
# The matrix lane from below: `ggaudit check` under the fault layer (tests/faultlayer.c), every fault kind x read
# path x once or every time x what decides (tests/test_check_matrix.py, GGAUDIT_BELOW_MATRIX=1): some 70 children,
# a minute on 2 cores, so not in the default suite. A skipped test fails the lane: a lane that skips checks nothing.
# Usage: scripts/below_lane.sh [pytest args]; exit status 0 when every case ran and passed.
set -euo pipefail
cd "$(dirname "$0")/.."
# Direct reads keep their alignment rules on a disk's filesystem, not on a tmpfs.
export TMPDIR="${TMPDIR:-/var/tmp}"
out="$(mktemp "${TMPDIR}/below-lane.XXXXXX")"
trap 'rm -f "$out"' EXIT
status=0
GGAUDIT_BELOW_MATRIX=1 python -m pytest -q -rs -p no:cacheprovider tests/test_check_matrix.py "$@" \
    | tee "$out" || status=$?
if grep -qE '^SKIPPED|[0-9]+ skipped' "$out"; then
    echo "below lane: FAILED: tests were skipped (above); the lane must run every one" >&2
    exit 1
fi
exit "$status"
