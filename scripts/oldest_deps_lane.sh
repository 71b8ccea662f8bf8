#!/usr/bin/env bash
# The oldest-dependencies lane: the test suite in a fresh venv holding the oldest release of each
# dependency that pyproject.toml allows (scripts/oldest-deps.txt), so its floors stay true.
# Usage: scripts/oldest_deps_lane.sh [pytest args]; exit status is pytest's. With no args, the whole suite on
# both cores (pytest-xdist, a tool of the lane's, not a dependency: it is not pinned to an oldest release).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${GGAUDIT_OLDEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ggaudit-oldest-venv}"
if [ ! -x "$venv/bin/python" ] || ! cmp -s scripts/oldest-deps.txt "$venv/oldest-deps.txt"; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r scripts/oldest-deps.txt
    cp scripts/oldest-deps.txt "$venv/oldest-deps.txt"
fi
"$venv/bin/python" -c "import xdist" 2>/dev/null ||
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps pytest-xdist==3.8.0 execnet==2.1.1
# The project itself without its dependencies: the pins above are what it must run on.
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps -e .
"$venv/bin/python" -m pip check
if [ $# -eq 0 ]; then set -- -n 2; fi
exec "$venv/bin/python" -m pytest -p no:cacheprovider -q "$@"
