#!/usr/bin/env bash
# The test suite: lint, types, then pytest (Docker tests fail, not skip, under CI=true).
#
# pytest runs in three phases (each prints its own summary; the closing line adds them up as
# "pytest: N passed, N failed, N skipped", and the exit status is non-zero when a phase failed --
# pytest's 5, "no test collected", only when no phase collected one):
#   1. pytest -m "not docker and not third_party", on TIDEMARK_TEST_WORKERS pytest-xdist workers
#      (default: one per CPU, at most 4; 1 runs it in this process).  These tests start no
#      container, and most of their time is one CPU's worth of Python, a Spark driver or a local
#      broker cluster's processes: with one pytest the second core of a two-core machine sat idle
#      or went to cargo, and this phase was most of the suite (38 of 70 minutes, measured
#      2026-12-01).  Each worker starts its own Spark session and picks its own free ports.
#   2. pytest -m "docker and not third_party", one test at a time: their fault choreographies
#      run against real containers, and two clusters on two cores would make their timing the
#      machine's rather than the test's.
#   3. pytest -m "third_party", after the third-party builds, when scripts/setup.sh left them
#      running in the background (a fresh machine's `setup.sh test`: TIDEMARK_THIRD_PARTY_BUILD
#      names the build's directory; tansu, then nisshi, then their images): they overlap phases 1
#      and 2 -- niced, so rustc takes only the CPU the tests leave idle (a fresh machine's CI
#      measured 2026-11-29: waiting for the build before any Docker test made the critical path
#      setup + build + every Docker test) --, and a failed build fails the run here, with the
#      tail of its log.
# The three marker expressions split the suite exactly (every test is in one of them).  With
# arguments (a selection of the caller's), pytest runs once, in this process, as the caller asked.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
say() { printf '== %s (%ss)\n' "$*" "$((SECONDS - started))"; }

build=${TIDEMARK_THIRD_PARTY_BUILD:-}

# The background build's exit status once it ended ("" while it runs); a build whose shell
# vanished without a status (killed) counts as failed.
build_status() {
    if [ -f "$build/status" ]; then
        cat "$build/status"
    elif ! kill -0 "$(cat "$build/pid")" 2>/dev/null; then
        sleep 1  # the status may land between the two looks
        cat "$build/status" 2>/dev/null || echo "killed"
    fi
}

fail_build() {
    echo "---- tail of $build/log"
    tail -n 40 "$build/log" || true
    echo "setup: building the third-party binaries or images failed ($1; log above); fix it or set TIDEMARK_THIRD_PARTY=0 to skip those targets" >&2
    exit 1
}

# Waits for the background build (binaries, then images), then asks for the tansu and nisshi images
# as setup.sh does when it builds them in the foreground -- the background built them, so each
# answers in a second with its tag, unless no Docker engine answered then; nothing to do when no
# build was left in the background.
finish_build() {
    [ -n "$build" ] || return 0
    say "waiting for the third-party builds (log: $build/log)"
    local status waited=0
    until status=$(build_status) && [ -n "$status" ]; do
        sleep 5
        waited=$((waited + 5))
        [ $((waited % 300)) != 0 ] || say "still building ($waited s waited)"
    done
    [ "$status" = 0 ] || fail_build "exit $status"
    say "binaries: $(tr '\n' ' ' <"$build/binary")"
    say "built in the background: $(tr '\n' ' ' <"$build/images" 2>/dev/null)"
    rm -rf "$build"  # its log told nothing a failure would need
    if docker info >/dev/null 2>&1; then
        local image target
        for target in tansu nisshi; do
            image=$(.venv/bin/tidemark image build --target "$target") && [ -n "$image" ] \
                || { echo "setup: building the $target image failed (see the error above)" >&2; exit 1; }
            say "$target image: $image"
        done
    fi
}

# Runs pytest, keeping going when it fails; its status is left in $phase_status.
run_phase() {
    local junit=$1
    shift
    .venv/bin/pytest -q --junitxml="$junit" "$@" && phase_status=0 || phase_status=$?
}

# "pytest: N passed, N failed, N skipped" over the phases' JUnit reports (failed counts errors).
closing_line() {
    .venv/bin/python - "$@" <<'EOF'
import sys
import xml.etree.ElementTree as ElementTree

passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        suites = ElementTree.parse(path).getroot().iter("testsuite")
    except (OSError, ElementTree.ParseError):
        continue
    for suite in suites:
        tests, failures, errors, skips = (int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped"))
        passed += tests - failures - errors - skips
        failed += failures + errors
        skipped += skips
print(f"pytest: {passed} passed, {failed} failed, {skipped} skipped")
EOF
}

say "ruff"; .venv/bin/ruff check testbed harness nemesis workloads checker broker_impl tests bench
say "ruff format --check"; .venv/bin/ruff format --check testbed harness nemesis workloads checker broker_impl tests bench
say "mypy --strict"; .venv/bin/mypy

if [ -n "$build" ]; then
    status=$(build_status)
    [ -z "$status" ] || [ "$status" = 0 ] || fail_build "exit $status"  # failed fast (no cargo?)
fi
if [ $# -gt 0 ]; then
    finish_build
    say "pytest"; exec .venv/bin/pytest -q "$@"
fi

# Phase 1's workers: one per CPU, at most 4 (each may hold a Spark driver's JVM and a local
# cluster's broker processes); TIDEMARK_TEST_WORKERS overrides.
workers=${TIDEMARK_TEST_WORKERS:-$(nproc 2>/dev/null || echo 1)}
[[ "$workers" =~ ^[1-9][0-9]*$ ]] || { echo "run-tests: TIDEMARK_TEST_WORKERS must be a whole number >= 1, not '$workers'" >&2; exit 2; }
[ -n "${TIDEMARK_TEST_WORKERS:-}" ] || [ "$workers" -le 4 ] || workers=4
parallel=()
[ "$workers" = 1 ] || parallel=(-n "$workers")

reports=$(mktemp -d "${TMPDIR:-/tmp}/tidemark-pytest.XXXXXX")
statuses=()
say "pytest, phase 1 of 3: not docker and not third_party, $workers worker(s)${build:+ (the builds go on in the background)}"
run_phase "$reports/phase-1.xml" -m "not docker and not third_party" "${parallel[@]}"
statuses+=("$phase_status")
say "pytest, phase 2 of 3: docker and not third_party${build:+ (the builds, niced, take what they leave)}"
run_phase "$reports/phase-2.xml" -m "docker and not third_party"
statuses+=("$phase_status")
finish_build
say "pytest, phase 3 of 3: third_party"
run_phase "$reports/phase-3.xml" -m "third_party"
statuses+=("$phase_status")
say "pytest done"
closing_line "$reports"/phase-*.xml
rm -rf "$reports"
collected=0
for status in "${statuses[@]}"; do
    [ "$status" = 0 ] || [ "$status" = 5 ] || exit "$status"
    [ "$status" = 5 ] || collected=1
done
[ "$collected" = 1 ] || exit 5
exit 0
