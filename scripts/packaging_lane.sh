#!/usr/bin/env bash
# The packaging lane: build the sdist and the wheel (`python -m build`, which builds the wheel from the sdist, so a
# file the build needs but the sdist lacks fails here), check that both hold every file of ggaudit/, install the
# wheel in a fresh venv and run `ggaudit --version` and README.md's quick start with it from a folder outside the
# checkout, so a module or data file left out of the package fails here rather than on a user's machine. Last,
# README.md's Linux install exactly as written (its lines make their own venv), in a fresh copy of the checkout,
# with Debian's own python3 when this machine has one that refuses `pip install` outside a venv (PEP 668).
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
host_path="$PATH"     # README.md's install runs with the host's python3, not the wheel's venv's
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
cp -a "$work/src" "$work/readme-install"     # README.md's install runs in a copy the build has not touched
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

# README.md's Linux install, as written: the one block of its Install section that starts `python3 -m venv`.
readme_install="$(python3 - "$repo/README.md" <<'EOF'
import re, sys
section = open(sys.argv[1], encoding="utf-8").read().split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
blocks = [b for b in re.findall(r"^```\n(.*?)^```$", section, re.DOTALL | re.MULTILINE) if b.startswith("python3 -m venv ")]
if len(blocks) != 1:
    sys.exit(f"packaging: FAILED: README.md's Install has {len(blocks)} blocks starting `python3 -m venv`, not 1")
print(blocks[0], end="")
EOF
)"
shim="$work/python3-shim"
mkdir "$shim"
managed='import os, sys, sysconfig; sys.exit(not os.path.isfile(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "$managed"; then
    ln -s /usr/bin/python3 "$shim/python3"
    # What a Debian or Ubuntu user meets with the install line README.md no longer gives: the lane's python3 is theirs.
    refused="$(cd "$work/readme-install" && PATH="$shim:$host_path" python3 -m pip install --dry-run . 2>&1)" \
        && fail "/usr/bin/python3 -m pip install . was not refused: this python3 is not externally managed after all"
    if grep -q 'No module named pip' <<< "$refused"; then
        log "/usr/bin/python3 has no pip (Debian's python3-pip): its refusal of pip install is not shown"
    else
        grep -q 'externally-managed-environment' <<< "$refused" || fail "pip install . refused otherwise than by PEP 668: $refused"
    fi
    log "README.md's Linux install with /usr/bin/python3 ($(/usr/bin/python3 --version)), externally managed (PEP 668)"
else
    log "README.md's Linux install with $(PATH="$host_path" command -v python3) (this machine has no externally managed /usr/bin/python3)"
fi
got="$(cd "$work/readme-install" && PATH="$shim:$host_path" bash -e -c "$readme_install"$'\n''command -v ggaudit' 2>&1)" \
    || fail "README.md's Linux install failed:"$'\n'"$got"
[[ "$(tail -n 2 <<< "$got")" == "$want"$'\n'"$work/readme-install/.venv/bin/ggaudit" ]] \
    || fail "README.md's Linux install ends with"$'\n'"$(tail -n 2 <<< "$got")"$'\n'"not '$want' from its .venv"
log "README.md's Linux install, as written: $want, from its .venv"
log "passed"
