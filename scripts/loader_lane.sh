#!/usr/bin/env bash
# The loader lane: llama.cpp's own loader as the ground truth for ggaudit's metadata checks. Builds a program that
# only loads a model (scripts/loader_lane/load.c) against the llama.cpp vendored in the llama-cpp-python sdist,
# cached outside the checkout (a second run builds nothing), then runs tests/test_loader_differential.py with
# GGAUDIT_LOADER set: every crafted file of tests/loader_cases.py, the loader's verdict against ggaudit's.
# Usage: scripts/loader_lane.sh [pytest args]. Exit 0 when every case agrees, or (with a "skipped:" line) when
# there is no C compiler or cmake to build the loader with.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${GGAUDIT_LOADER_SDIST:-0.3.36}"
cache="${GGAUDIT_LOADER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ggaudit-loader}"
dir="$cache/$version"
bin="$dir/build/ggaudit-load"

for tool in cc c++ cmake; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "loader lane: skipped: no compiler/cmake ($tool not found)"
        exit 0
    fi
done

fetch_source() {
    local src="$cache/src"
    local tarball="$src/llama_cpp_python-$version.tar.gz"
    mkdir -p "$src"
    if [ ! -f "$tarball" ]; then
        python -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$src"
    fi
    if [ ! -d "$src/llama_cpp_python-$version/vendor/llama.cpp" ]; then
        tar -xzf "$tarball" -C "$src"
    fi
    echo "$src/llama_cpp_python-$version/vendor/llama.cpp"
}

build() {
    local llama_dir generator=()
    llama_dir="$(fetch_source)"
    command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
    # A build directory configured from another source folder (a cache from before the copy) is configured again.
    local cache_file="$dir/build/CMakeCache.txt"
    if [ -f "$cache_file" ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$dir/lane" "$cache_file"; then
        rm -rf "$dir/build/CMakeCache.txt" "$dir/build/CMakeFiles"
    fi
    # -O1: the crafted models are tiny, so the loader's speed does not matter; its build time does (2 cores).
    cmake -S "$dir/lane" -B "$dir/build" "${generator[@]}" -DLLAMA_DIR="$llama_dir" \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
        -DGGML_NATIVE=OFF -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_COMMON=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF \
        -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=OFF >"$dir/configure.log"
    cmake --build "$dir/build" --target ggaudit-load -j "${GGAUDIT_LOADER_JOBS:-2}"
}

mkdir -p "$dir/lane"
start=$SECONDS
# The program's sources are copied into the cache and built from there, so any checkout (a CI clone, another
# folder) shares one build: it is rebuilt only when their content differs from the copy's (ninja then rebuilds
# what changed), never for a checkout's newer file times.
changed=0
for f in load.c CMakeLists.txt; do
    if ! cmp -s "scripts/loader_lane/$f" "$dir/lane/$f"; then
        cp "scripts/loader_lane/$f" "$dir/lane/$f"
        changed=1
    fi
done
if [ ! -x "$bin" ] || [ "$changed" = 1 ]; then
    build
    echo "loader lane: built $bin in $((SECONDS - start)) s"
fi
# -s: each case prints the loader's verdict and reason beside ggaudit's findings, and the summary line.
GGAUDIT_LOADER="$bin" python -m pytest -q -s -rs -p no:cacheprovider tests/test_loader_differential.py "$@"
