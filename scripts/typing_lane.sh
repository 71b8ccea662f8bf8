#!/usr/bin/env bash
# The typing lane: README.md's editable install, as written ("Run the tests"), in a fresh venv and a fresh copy of
# the checkout, then `mypy --strict` on the engine-style example suite (examples/engine_tests/) from a folder
# outside that copy, so ggaudit's types can come only through the install. It fails when mypy cannot find ggaudit
# (an editable install by an import hook, which type checkers do not run), when a misuse misuse.py marks with
# `# type: ignore[code]` is no longer that error (--warn-unused-ignores: as when ggaudit reaches mypy as Any), and
# when a job's return type is not its report's (misuse.py's assert_type lines). Last, the example suite passes
# under pytest against the same install.
# Usage: scripts/typing_lane.sh; exit status 0 when every check passed, non-zero at the first that failed.
# mypy is the host's (pyproject.toml's lint extra, as CI installs it), pointed at the venv's python. The venv and
# the copy are new on every run, at the same place, so mypy's cache (kept beside them) stays valid.
set -euo pipefail
cd "$(dirname "$0")/.."
base="${GGAUDIT_TYPING_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ggaudit-typing}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
unset PYTHONPATH PYTHONHOME MYPYPATH     # ggaudit may reach mypy and the venv through the install only
log() { printf 'typing: %s\n' "$*" >&2; }
fail() { printf 'typing: FAILED: %s\n' "$*" >&2; exit 1; }

install="$(python - <<'EOF'
import re
section = open("README.md", encoding="utf-8").read().split("\n## Run the tests\n", 1)[1].split("\n## ", 1)[0]
(command,) = re.findall(r"^(pip install -e \S+) && ", section, re.MULTILINE)
print(command)
EOF
)"
python -m mypy --version >/dev/null 2>&1 || fail "mypy is not installed here: pip install -e '.[lint]'"

mkdir -p "$base"
base="$(cd "$base" && pwd -P)"          # as the venv's python will name the copy's files
rm -rf "$base/src" "$base/venv" "$base/examples"
mkdir -p "$base/src" "$base/examples"
# The copy is what a commit of the work tree would hold: tracked and untracked, not ignored, files.
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    if [ -e "$f" ]; then printf '%s\0' "$f"; fi
done | tar --null -T - -cf - | tar -x -C "$base/src"
cp examples/engine_tests/*.py "$base/examples/"
python -m venv "$base/venv"
(cd "$base/src" && PATH="$base/venv/bin:$PATH" && bash -e -c "$install" >"$base/install.log" 2>&1) ||
    { tail -n 20 "$base/install.log" >&2; fail "README.md's editable install failed: $install"; }
log "$install, in a fresh venv"

cd "$base/examples"
where="$("$base/venv/bin/python" -c 'import ggaudit; print(ggaudit.__file__)')"
[[ "$where" == "$base/src/ggaudit/__init__.py" ]] || fail "the venv imports ggaudit from $where, not the copy"
python -m mypy --strict --warn-unused-ignores --config-file= --python-executable "$base/venv/bin/python" \
    --cache-dir "$base/mypy-cache" --no-error-summary -- *.py || fail "mypy --strict on examples/engine_tests/"
log "mypy --strict --warn-unused-ignores: ggaudit's types through the editable install, every misuse caught"
"$base/venv/bin/python" -m pytest -q -p no:cacheprovider -- test_engine.py >&2 || fail "the example suite under pytest"
log "the example suite passes against the editable install"
