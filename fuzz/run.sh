#!/usr/bin/env bash
# fuzz/run.sh — builds the cargo-fuzz targets (libFuzzer + AddressSanitizer) and runs each for a
# bounded time from its seed corpus (fuzz/seeds/<target>); a crash, leak or timeout fails the run.
# Prints the executions per target and ends with a cargo-format summary line (one "test" per
# target) that scripts/test folds into its own.
#
# Usage: `bash fuzz/run.sh [TARGET...]` (default: every target). TERN_FUZZ_SECONDS sets the time
# per target (default 15). New corpus entries go to a temp dir, never into the repository; a
# crashing input is kept in target/fuzz-artifacts/<target>/ with the command that replays it.
#
# The toolchain is stable: cargo-fuzz passes nightly-only flags (-Zsanitizer=address and the
# sanitizer-coverage passes), which a stable rustc accepts with RUSTC_BOOTSTRAP=1, set here for
# these builds only.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$here"
export PATH="${HOME:-/root}/.cargo/bin:$PATH"
export RUSTC_BOOTSTRAP=1
secs="${TERN_FUZZ_SECONDS:-15}"
t0=$(date +%s.%N)

summary() { # passed failed
    local elapsed
    elapsed=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    local status=ok
    [ "$2" -eq 0 ] || status=FAILED
    echo "test result: $status. $1 passed; $2 failed; 0 ignored; 0 measured; 0 filtered out; finished in ${elapsed}s"
}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz is not installed (scripts/setup installs it)" >&2
    summary 0 1
    exit 1
fi
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || mapfile -t targets < <(cargo fuzz list)
mkdir -p "$root/target"
if ! cargo fuzz build >/dev/null 2>"$root/target/fuzz-build.log"; then
    tail -30 "$root/target/fuzz-build.log" >&2
    echo "fuzz: cargo fuzz build failed (log: target/fuzz-build.log)" >&2
    summary 0 1
    exit 1
fi

passed=0
failed=0
for t in "${targets[@]}"; do
    work="$(mktemp -d "/tmp/tern-fuzz-$t-XXXXXX")"
    mkdir -p "$work/corpus"
    cargo fuzz run "$t" "$work/corpus" "seeds/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$work/" >"$work/log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
    units=$(find "$work/corpus" -type f | wc -l)
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        echo "fuzz $t: ok, ${execs:-?} executions in ${secs}s, $units new corpus entries"
    else
        failed=$((failed + 1))
        keep="$root/target/fuzz-artifacts/$t"
        mkdir -p "$keep"
        find "$work" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) \
            -exec cp {} "$keep/" \;
        cp "$work/log" "$keep/log"
        grep -E -A25 '^==[0-9]+==|panicked at|SUMMARY' "$work/log" | head -60 >&2
        echo "fuzz $t: FAILED (exit $rc) after ${execs:-?} executions; input and log in $keep;" \
            "replay: (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run $t $keep/<file>)" >&2
    fi
    rm -rf "$work"
done
summary "$passed" "$failed"
[ "$failed" -eq 0 ]
