#!/usr/bin/env bash
# The test suite: lint, types, then pytest (Docker tests fail, not skip, under CI=true).
#
# When scripts/setup.sh left the third-party builds running in the background (a fresh machine's
# `setup.sh test`: TIDEMARK_THIRD_PARTY_BUILD names the build's directory; tansu, then nisshi),
# pytest runs in three phases, so that the cargo builds overlap every test that needs neither:
#   1. pytest -m "not docker and not third_party"   while cargo builds;
#   2. pytest -m "docker and not third_party"       while cargo goes on, if it has not ended: it
#      runs at nice 19, so rustc takes only the CPU the containers leave idle (a fresh machine's
#      CI measured 2026-11-29: phase 1 alone did not cover the tansu build, and waiting for it
#      before any Docker test made the critical path setup + build + every Docker test);
#   3. wait for the builds -- a failed build fails the run here, with the tail of cargo's log --,
#      build the tansu and nisshi images, then pytest -m "third_party".
# The three marker expressions split the suite exactly (every test is in one of them). Each
# phase prints pytest's own summary; the closing line adds them up as "pytest: N passed,
# N failed, N skipped", and the exit status is non-zero when a phase failed (pytest's 5, "no
# test collected", only when no phase collected one). With arguments (a selection of the
# caller's), or without a background build, pytest runs once, as before.
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
    echo "setup: building the third-party binaries failed ($1; log above); fix it or set TIDEMARK_THIRD_PARTY=0 to skip those targets" >&2
    exit 1
}

# Waits for the background build, then builds the tansu and nisshi images on it (as setup.sh does
# when it builds them in the foreground).
finish_build() {
    say "waiting for the third-party builds (log: $build/log)"
    local status waited=0
    until status=$(build_status) && [ -n "$status" ]; do
        sleep 5
        waited=$((waited + 5))
        [ $((waited % 300)) != 0 ] || say "still building ($waited s waited)"
    done
    [ "$status" = 0 ] || fail_build "exit $status"
    say "binaries: $(tr '\n' ' ' <"$build/binary")"
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

if [ -z "$build" ]; then
    say "pytest"; exec .venv/bin/pytest -q "$@"
fi
status=$(build_status)
[ -z "$status" ] || [ "$status" = 0 ] || fail_build "exit $status"  # failed fast (no cargo?)
if [ $# -gt 0 ]; then
    finish_build
    say "pytest"; exec .venv/bin/pytest -q "$@"
fi

reports=$(mktemp -d "${TMPDIR:-/tmp}/tidemark-pytest.XXXXXX")
statuses=()
say "pytest, phase 1 of 3: not docker and not third_party (the builds go on in the background)"
run_phase "$reports/phase-1.xml" -m "not docker and not third_party"
statuses+=("$phase_status")
say "pytest, phase 2 of 3: docker and not third_party (the builds, niced, take what they leave)"
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
