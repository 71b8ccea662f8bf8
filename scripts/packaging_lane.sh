#!/usr/bin/env bash
# The packaging lane: build the sdist and the wheel (`python -m build`, which builds the wheel from the sdist, so a
# file the build needs but the sdist lacks fails here), check that both hold every file of ggaudit/, install the
# wheel in a fresh venv and run `ggaudit --version` and README.md's quick start with it from a folder outside the
# checkout, so a module or data file left out of the package fails here rather than on a user's machine.
# Usage: scripts/packaging_lane.sh; exit status 0 when every check passed, non-zero at the first that failed.
# The build runs in a temporary copy of the checkout's tracked and untracked, not ignored, files (a developer's
# uncommitted work included), so no build/ or *.egg-info is left in the checkout. The build tools live in a cached
# venv (pinned below, rebuilt when the pins change); the wheel's venv is new on every run, and pip resolves the
# wheel's dependencies from the index (its cache makes that fast).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd -P)"
build_reqs="build==1.6.1 setuptools==84.2.1"   # setuptools: pyproject's build-system backend, for --no-isolation
venv="${GGAUDIT_BUILD_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ggaudit-build-venv}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# The wheel's venv must import the installed package only: no path of the host's reaches it.
unset PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTHONUSERBASE
log() { printf 'packaging: %s\n' "$*" >&2; }
fail() { printf 'packaging: FAILED: %s\n' "$*" >&2; exit 1; }

if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/build-reqs" 2>/dev/null)" != "$build_reqs" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    # shellcheck disable=SC2086   # the pins are words
    "$venv/bin/pip" install -q $build_reqs
    printf '%s' "$build_reqs" > "$venv/build-reqs"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/ggaudit-packaging.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# A file deleted in the work tree but still in the index is skipped: the copy is what a commit of it would hold.
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    if [ -e "$f" ]; then printf '%s\0' "$f"; fi
done | tar --null -T - -cf - | (mkdir "$work/src" && tar -x -C "$work/src")
# No isolation: the build venv holds the backend already, so a warm run needs no network for the build.
"$venv/bin/python" -m build -q --no-isolation --outdir "$work/dist" "$work/src" >&2
wheel="$(ls "$work"/dist/ggaudit-*.whl)"
sdist="$(ls "$work"/dist/ggaudit-*.tar.gz)"
log "built $(basename "$sdist") and, from it, $(basename "$wheel")"

# Both archives hold every file of ggaudit/ (the JSON schema, py.typed, every module), and the sdist what a build
# from it reads (pyproject.toml, README.md: the long description).
python3 - "$work/src" "$sdist" "$wheel" <<'EOF'
import sys, tarfile, zipfile
from pathlib import Path
src, sdist, wheel = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
package = {p.relative_to(src).as_posix() for p in (src / "ggaudit").rglob("*") if p.is_file()}
with tarfile.open(sdist) as tar:
    top = tar.getnames()[0].split("/")[0]
    in_sdist = {n.removeprefix(top + "/") for n in tar.getnames()}
with zipfile.ZipFile(wheel) as z:
    in_wheel = set(z.namelist())
missing = {"sdist": sorted((package | {"pyproject.toml", "README.md"}) - in_sdist), "wheel": sorted(package - in_wheel)}
for archive, names in missing.items():
    for name in names:
        print(f"packaging: FAILED: the {archive} has no {name}", file=sys.stderr)
if any(missing.values()):
    sys.exit(1)
EOF
log "the sdist and the wheel hold all $(cd "$work/src" && find ggaudit -type f | wc -l) files of ggaudit/"

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$wheel"
export PATH="$work/venv/bin:$PATH"
mkdir -p "$work/run/fixtures"
cp fixtures/all_types.gguf fixtures/all_types-q4_k-inf.gguf "$work/run/fixtures/"
cd "$work/run"
where="$(python -c 'import ggaudit; print(ggaudit.__file__)')"
[[ "$where" == "$work/venv/"* ]] || fail "ggaudit is imported from $where, not from the wheel's venv"
want="ggaudit, version $(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo/ggaudit/_version.py")"
got="$(ggaudit --version)"
[[ "$got" == "$want" ]] || fail "ggaudit --version says '$got', ggaudit/_version.py '$want'"
log "$got, from $where"

# README.md's quick start, as written: each `$ ggaudit ...` line's output and the exit status its `$ echo $?` names.
python3 - "$repo/README.md" <<'EOF'
import re, shlex, subprocess, sys
readme = open(sys.argv[1], encoding="utf-8").read()
section = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
block = re.search(r"^```console\n(.*?)^```$", section, re.DOTALL | re.MULTILINE).group(1)
steps = re.split(r"^\$ ", block, flags=re.MULTILINE)[1:]
status, ran = None, 0
for step in steps:
    command, _, shown = step.partition("\n")
    if command == "echo $?":
        if status != int(shown):
            sys.exit(f"packaging: FAILED: the quick start exits {status}, README.md says {shown.strip()}")
        continue
    done = subprocess.run(shlex.split(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.stdout != shown:
        sys.exit(f"packaging: FAILED: `{command}` printed\n{done.stdout}README.md shows\n{shown}")
    status, ran = done.returncode, ran + 1
    print(f"packaging: `{command}`: as README.md shows, exit {status}", file=sys.stderr)
if ran == 0:
    sys.exit("packaging: FAILED: README.md's quick start has no command")
EOF
log "passed"
