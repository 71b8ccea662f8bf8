#!/usr/bin/env bash
# The CI lane of docs/ci.md: the GitHub Action and the pre-commit hooks, run as far as this machine allows.
#   1. action.yml's steps, read from it and run as a runner runs them (scripts/action_lane.py): the install from
#      the action's own folder, the scan of two fixtures, the SARIF checked as upload-sarif would take it (the
#      upload itself needs GitHub), and the job's status as the action sets it.
#   2. .pre-commit-hooks.yaml through `pre-commit try-repo`, pre-commit from PyPI (pinned below, in a cached venv):
#      both hooks, installed by pre-commit, on a git repository holding the clean fixture and the +Inf one: each
#      fails, naming the +Inf, and scan says the clean one is clean. The hooks' repository is a commit of the checkout's tracked and untracked, not ignored,
#      files (try-repo takes a commit, so uncommitted work is tried too); pre-commit's own cache is a
#      temporary folder, so no environment of it is left behind.
# Usage: scripts/action_lane.sh; exit status 0 when both passed, non-zero at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd -P)"
pre_commit_pin="pre-commit==4.7.0"
venv="${GGAUDIT_PRE_COMMIT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ggaudit-pre-commit-venv}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
log() { printf 'action lane: %s\n' "$*" >&2; }
fail() { printf 'action lane: FAILED: %s\n' "$*" >&2; exit 1; }

python3 scripts/action_lane.py

if [ ! -x "$venv/bin/pre-commit" ] || [ "$(cat "$venv/pin" 2>/dev/null)" != "$pre_commit_pin" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "$pre_commit_pin"
    printf '%s' "$pre_commit_pin" > "$venv/pin"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/ggaudit-pre-commit.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export PRE_COMMIT_HOME="$work/cache"
git_quiet() { git -c user.name=lane -c user.email=lane@localhost -c commit.gpgsign=false "$@" >/dev/null; }

mkdir "$work/hooks"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    if [ -e "$f" ]; then printf '%s\0' "$f"; fi
done | tar --null -T - -cf - | tar -x -C "$work/hooks"
(cd "$work/hooks" && git_quiet init -q && git_quiet add -A && git_quiet commit -q -m hooks)

mkdir "$work/models"
cp "$repo/fixtures/all_types.gguf" "$repo/fixtures/all_types-q4_k-inf.gguf" "$work/models/"
(cd "$work/models" && git_quiet init -q && git_quiet add -A)

# One try-repo, both hooks (each try-repo installs the hooks' environment anew: some 13 s): each fails for the
# +Inf fixture, names the +Inf where README.md's quick start says it is, and finds the clean fixture clean.
status=0
out="$(cd "$work/models" && "$venv/bin/pre-commit" try-repo "$work/hooks" --all-files --color never 2>&1)" || status=$?
printf '%s\n' "$out" | sed 's/^/action lane:   | /' >&2
[ "$status" -eq 1 ] || fail "pre-commit try-repo exits $status, not 1"
inf='+inf at file all_types-q4_k-inf.gguf offset 155088, length 2: tensor types.q4_k.weight, row 5, block 1'
for hook in ggaudit-scan ggaudit-check; do
    block="$(sed -n "/^- hook id: $hook\$/,/^\$/p" <<< "$out")"
    grep -qF -- "- exit code: 1" <<< "$block" && grep -qF -- "$inf" <<< "$(sed -n "/^- hook id: $hook\$/,/^ggaudit /p" <<< "$out")" \
        || fail "$hook: not failed with exit 1 naming the +Inf"
    log "$hook: installed by pre-commit, failed with exit 1, naming the +Inf"
done
grep -qzF $'model all_types.gguf: 34 tensors, 122048 bytes of tensor data scanned in 1 file\nnot applicable (integer data): types.i8.weight, types.i16.weight, types.i32.weight, types.i64.weight\nresult: clean: no non-finite values' <<< "$out" \
    || fail "ggaudit-scan: the clean fixture not said clean"
log "ggaudit-scan: the clean fixture clean"
log "passed"
