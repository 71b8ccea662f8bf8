#!/usr/bin/env bash
# The templates lane: no false positive on real chat templates, and a verdict for every vocabulary-only GGUF.
# scripts/fetch_templates.py fetches the sdists of llama-cpp-python and vLLM (pinned there; once: kept in
# $GGAUDIT_TEMPLATES, default ${XDG_CACHE_HOME:-$HOME/.cache}/ggaudit-templates, outside the checkout) and writes
# their 133 templates and llama.cpp's 19 ggml-vocab GGUFs there; tests/test_template_corpus.py then requires no
# error or warning on each template and a clean scan (exit 0) of each vocabulary file. A skipped test fails the
# lane: a lane that skips checks nothing.
# Usage: scripts/templates_lane.sh [pytest args]; exit status 0 when every test ran and passed.
set -euo pipefail
cd "$(dirname "$0")/.."
into="${GGAUDIT_TEMPLATES:-${XDG_CACHE_HOME:-$HOME/.cache}/ggaudit-templates}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
python scripts/fetch_templates.py --into "$into"
out="$(mktemp "${TMPDIR:-/tmp}/templates-lane.XXXXXX")"
trap 'rm -f "$out"' EXIT
status=0
GGAUDIT_TEMPLATE_CORPUS="$into/corpus" python -m pytest -q -rs -p no:cacheprovider tests/test_template_corpus.py \
    "$@" | tee "$out" || status=$?
if grep -qE '^SKIPPED|[0-9]+ skipped' "$out"; then
    echo "templates lane: FAILED: tests were skipped (above); the lane must run every one" >&2
    exit 1
fi
exit "$status"
