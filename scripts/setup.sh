#!/usr/bin/env bash
# Set up everything Tidemark needs on a fresh machine, then optionally run the demo or the tests.
#
#   bash scripts/setup.sh          # set up only
#   bash scripts/setup.sh demo     # set up, then run the demo campaign (Spark check, report)
#   bash scripts/setup.sh test     # set up, then run the test suite
#
# Idempotent and fast when nothing changed: Debian packages are installed only when
# missing, the virtualenv is rebuilt only when pyproject.toml changed, the Spark class
# archive only when the virtualenv or the JDK changed, and the container image only when
# its inputs changed (content-hash tag).
#
# Each log line carries the seconds since the start, so a CI log says where a fresh machine's
# time went.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mode=${1:-setup}
[ $# -gt 0 ] && shift

log() { printf '\033[1m[setup %4ss]\033[0m %s\n' "$SECONDS" "$*" >&2; }

# The third-party targets -- tansu and nisshi (`tidemark run --target tansu|nisshi`), brokers Tidemark
# did not write, built from crates.io -- are set up only when asked: in `test` mode (CI runs their
# tests) or with TIDEMARK_THIRD_PARTY=1; TIDEMARK_THIRD_PARTY=0 skips them (their tests then skip,
# or fail under CI=true). They need cargo (one-time builds of the pinned crates, tansu 4-10 min and
# nisshi 5-15 min on its nightly toolchain, then cached) and the host's PostgreSQL 15 for the tests
# that run them and PostgreSQL as local processes. In `test` mode uncached builds run in the
# background (niced) while the tests that need neither Docker nor them run: scripts/run-tests.sh
# waits for them, and fails when one failed (see there).
third_party=${TIDEMARK_THIRD_PARTY:-$([ "$mode" = test ] && echo 1 || echo 0)}
third_party_targets=(tansu nisshi)

# --- Debian packages ------------------------------------------------------------------
packages=(mmdebstrap fuse3 iptables iproute2 openjdk-17-jre-headless chromium libfaketime)
[ "$third_party" = 1 ] && packages+=(postgresql-15)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
# Java 17 may come from elsewhere than Debian (a JDK on PATH is enough for PySpark).
if printf '%s\n' "${missing[@]:-}" | grep -qx openjdk-17-jre-headless && java -version 2>&1 | grep -q 'version "17'; then
    missing=("${missing[@]/openjdk-17-jre-headless}")
fi
missing=($(printf '%s\n' "${missing[@]:-}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Python environment ----------------------------------------------------------------
python=${PYTHON:-}
if [ -z "$python" ]; then
    for candidate in python3.11 python3.12 python3.13 python3; do
        if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
            python=$candidate; break
        fi
    done
fi
[ -n "$python" ] || { echo "setup: Python >= 3.11 is required" >&2; exit 1; }
stamp=.venv/.tidemark-installed
want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "creating the Python environment in .venv (first time: a few minutes, PySpark is large)"
    [ -x .venv/bin/python ] || "$python" -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e '.[dev]'
    echo "$want" > "$stamp"
else
    log "Python environment up to date"
fi

# --- the third-party binaries and images in the background (test mode, not cached yet) ------------
# Started as soon as the virtualenv exists, so the Spark archive, the container image, lint, mypy
# and the first phase of pytest all overlap the build.  Once the binaries are built and this script
# has its node image (below), the background goes on to the third-party images: their PostgreSQL
# base (mmdebstrap) and node image on it.  Built after pytest's second phase instead, they were
# 115 s on a fresh machine's critical path (CI measured 2026-12-03: 3636 s in all); the cargo
# builds end before that phase is half over, so the images fit in what it leaves idle.

# One build at a time per cache (a second setup waits for the first, then finds the binaries cached).
build_lock() {
    local cache
    cache=$(.venv/bin/python -c 'from testbed.cluster.image_build import cache_directory; print(cache_directory())')
    mkdir -p "$cache"
    if command -v flock >/dev/null; then flock "$cache/third-party-build.lock" "$@"; else "$@"; fi
}
binaries_cached() {
    .venv/bin/python -c 'import sys; from testbed.cluster.nisshi_image import NISSHI_IMAGE; from testbed.cluster.tansu_image import TANSU_IMAGE; sys.exit(any(image.cached_binary() is None for image in (TANSU_IMAGE, NISSHI_IMAGE)))'
}
# Builds every third-party binary in turn (a cached one answers in a second), printing their paths.
build_binaries=(sh -c 'for target in "$@"; do .venv/bin/tidemark image build --target "$target" --binary-only || exit; done' build-binaries "${third_party_targets[@]}")
setup_pid=$$  # this script's, and the scripts/run-tests.sh it execs into
# Waits until this script built its node image (the marker node-image in the build's directory,
# naming it, or empty when no Docker engine answers), then builds the third-party images, printing
# their tags; fails when this script ended without the marker (its image build failed).  The
# images share the wheelhouse cache with the node image: hence after it, never beside it.
build_images_after_node_image() {
    local marker=$TIDEMARK_THIRD_PARTY_BUILD/node-image target
    until [ -f "$marker" ]; do
        kill -0 "$setup_pid" 2>/dev/null || { echo "setup ended before its node image was built" >&2; return 1; }
        sleep 2
    done
    [ -n "$(cat "$marker")" ] || return 0
    for target in "${third_party_targets[@]}"; do
        "${background[@]}" .venv/bin/tidemark image build --target "$target" || return
    done
}
in_background=0
unset TIDEMARK_THIRD_PARTY_BUILD  # only this script sets it, for scripts/run-tests.sh
if [ "$third_party" = 1 ] && [ "$mode" = test ] && ! binaries_cached; then
    # The build's directory: its log, the binaries' paths and the images' tags (stdout), its pid
    # and, once it ended, its exit status (written whole by a rename, so a reader never sees half
    # of it).
    TIDEMARK_THIRD_PARTY_BUILD=$(mktemp -d "${TMPDIR:-/tmp}/tidemark-third-party-build.XXXXXX")
    export TIDEMARK_THIRD_PARTY_BUILD
    # Niced, and in the idle I/O class where the scheduler has one: the Docker tests run beside it.
    background=(nice -n 19)
    ! command -v ionice >/dev/null || background+=(ionice -c 3)
    (
        {
            build_lock "${background[@]}" "${build_binaries[@]}" >"$TIDEMARK_THIRD_PARTY_BUILD/binary" \
                && build_images_after_node_image >"$TIDEMARK_THIRD_PARTY_BUILD/images"
        } 2>"$TIDEMARK_THIRD_PARTY_BUILD/log" && status=0 || status=$?
        echo "$status" >"$TIDEMARK_THIRD_PARTY_BUILD/status.new"
        mv "$TIDEMARK_THIRD_PARTY_BUILD/status.new" "$TIDEMARK_THIRD_PARTY_BUILD/status"
    ) </dev/null >/dev/null 2>&1 &  # holds none of our output pipes: a caller reading to EOF never waits on cargo
    echo $! >"$TIDEMARK_THIRD_PARTY_BUILD/pid"
    in_background=1
    log "building ${third_party_targets[*]} and their images in the background (niced; log: $TIDEMARK_THIRD_PARTY_BUILD/log); every test that does not need them runs meanwhile"
fi

# --- Spark class archive (checker.spark.classes) -----------------------------------------
# Maps Spark's classes pre-parsed into every driver JVM (session start 4 s -> 2 s); rebuilt
# when the Python environment or the JDK changed.  Without it checks are only slower.  Built
# beside the container image (one JVM beside mmdebstrap and docker build, on two cores): one after
# the other they were 62 s and 108 s of a fresh machine's set-up (CI measured 2026-12-04).
archive_stamp=.venv/share/tidemark/spark-classes.stamp
archive_want="$want $( (java -version 2>&1 || true) | head -1)"
archive_pid=""
if [ ! -f .venv/share/tidemark/spark-classes.jsa ] || [ "$(cat "$archive_stamp" 2>/dev/null)" != "$archive_want" ]; then
    log "building the Spark class archive (once, about a minute, beside the container image)"
    # In a process group of its own (setsid), so that a set-up that fails or is interrupted below
    # takes it down whole -- the Python and the java it starts -- and a Ctrl-C reaches it only so.
    session=(); ! command -v setsid >/dev/null || session=(setsid)
    "${session[@]}" bash -c '.venv/bin/python -m checker.spark.classes >/dev/null && echo "$1" >"$2"' \
        build-archive "$archive_want" "$archive_stamp" &
    archive_pid=$!
    trap '[ -z "$archive_pid" ] || kill -- "-$archive_pid" 2>/dev/null || kill "$archive_pid" 2>/dev/null || true' EXIT
else
    log "Spark class archive up to date"
fi

# --- container image -------------------------------------------------------------------
if docker info >/dev/null 2>&1; then
    # The tag is the build's only stdout line; progress and errors go to stderr. A failed build
    # fails the setup: container runs and their tests cannot work without the image.
    if image=$(.venv/bin/tidemark image build) && [ -n "$image" ]; then
        log "container image: $image"
    else
        log "building the container image failed (see the error above); fix it, then rerun this script or: .venv/bin/tidemark image build"
        exit 1
    fi
else
    log "no Docker engine answers: skipping the image (container runs and tests need it)"
fi
if [ -n "$archive_pid" ]; then
    if wait "$archive_pid"; then
        log "Spark class archive built"
    else
        log "no Spark class archive: checks still work, Spark sessions start slower"
    fi
    archive_pid=""
fi
# The background build's cue (see build_images_after_node_image): the node image, or empty.
if [ "$in_background" = 1 ]; then
    echo "${image:-}" >"$TIDEMARK_THIRD_PARTY_BUILD/node-image.new"
    mv "$TIDEMARK_THIRD_PARTY_BUILD/node-image.new" "$TIDEMARK_THIRD_PARTY_BUILD/node-image"
fi

# --- the third-party targets in the foreground (only when asked, see above; test mode's build is in the background) --
if [ "$third_party" = 1 ] && [ "$in_background" = 0 ]; then
    for target in "${third_party_targets[@]}"; do
        # Prints the binary's path; a cached one answers in a second. Progress goes to stderr.
        if binary=$(build_lock .venv/bin/tidemark image build --target "$target" --binary-only) && [ -n "$binary" ]; then
            log "$target binary: $binary"
        else
            log "building $target failed (see above); fix it or set TIDEMARK_THIRD_PARTY=0 to skip the third-party targets"
            exit 1
        fi
        if docker info >/dev/null 2>&1; then
            if image=$(.venv/bin/tidemark image build --target "$target") && [ -n "$image" ]; then
                log "$target image: $image"
            else
                log "building the $target image failed (see the error above)"
                exit 1
            fi
        fi
    done
fi

case "$mode" in
    setup) log "ready: .venv/bin/tidemark --help" ;;
    demo) exec .venv/bin/tidemark demo "$@" ;;
    test) exec bash scripts/run-tests.sh "$@" ;;
    *) echo "usage: bash scripts/setup.sh [setup|demo|test]" >&2; exit 254 ;;
esac
