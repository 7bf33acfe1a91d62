#!/usr/bin/env bash
# Coverage-guided fuzzing of the core (fuzz/): builds the libFuzzer targets with ASan and UBSan
# into build-fuzz/ (clang 14: scripts/install-deps.sh fuzz), then runs each one for a while on a
# temporary copy of its seed corpus (fuzz/corpus/<target>/ is never written to).
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]    (default: 60 s; config safetensors analyze)
#   FUZZ_ARGS="-runs=1000000" scripts/fuzz.sh 3600 analyze    # extra libFuzzer flags
#   FUZZ_ARGS="-fork=1 -ignore_crashes=1" scripts/fuzz.sh ...  # go on past findings, keep them all
# Prints the executions and findings per target and a closing "fuzz: N passed, M failed" line;
# exits 1 on any finding. A finding (the crashing, leaking or slow input) is copied to
# build-fuzz/findings/<target>/; reproduce it with build-fuzz/fuzz_<target> FILE.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(config safetensors analyze)
case "$seconds" in '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]" >&2; exit 2 ;; esac
for t in "${targets[@]}"; do
  [ -f "fuzz/fuzz_$t.cpp" ] || { echo "unknown fuzz target '$t' (config, safetensors, analyze)" >&2; exit 2; }
done

cxx="${FUZZ_CXX:-clang++-14}"
command -v "$cxx" >/dev/null || { echo "$cxx not found: run scripts/install-deps.sh fuzz" >&2; exit 2; }
build_start=$SECONDS
cmake -S fuzz -B build-fuzz -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build build-fuzz -j2 --target "${targets[@]/#/fuzz_}" >/dev/null
echo "fuzz: targets built in $((SECONDS - build_start)) s"

work="$(mktemp -d "${TMPDIR:-/tmp}/biaslab-fuzz.XXXXXX")"
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
for t in "${targets[@]}"; do
  dict="fuzz/config.dict"
  [ "$t" = safetensors ] && dict="fuzz/safetensors.dict"
  mkdir -p "$work/$t/corpus" "$work/$t/findings"
  cp fuzz/corpus/"$t"/* "$work/$t/corpus/"
  log="$work/$t/log.txt"
  rc=0
  # -timeout: one input running 10 s is a hang; -rss_limit_mb: 2 GB is a memory blow-up.
  # ${FUZZ_ARGS} is split on purpose (several flags).
  # shellcheck disable=SC2086
  "build-fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -dict="$dict" \
    -print_final_stats=1 -artifact_prefix="$work/$t/findings/" ${FUZZ_ARGS:-} \
    "$work/$t/corpus" >"$log" 2>&1 || rc=$?
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  # -fork=N (through FUZZ_ARGS) prints no stat:: lines; its progress lines start "#RUNS:".
  [ -n "$runs" ] || runs="$(sed -n 's/^#\([0-9][0-9]*\): cov:.*/\1/p' "$log" | tail -1)"
  speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
  rss="$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -1)"
  analysed="$(sed -n 's/^stat::analysed_configs: *//p' "$log" | tail -1)"  # fuzz_analyze only
  corpus="$(ls "$work/$t/corpus" | wc -l)"
  findings=("$work/$t/findings"/*)
  [ -e "${findings[0]}" ] || findings=()
  if [ "$rc" -eq 0 ] && [ ${#findings[@]} -eq 0 ]; then
    passed=$((passed + 1))
    echo "fuzz_$t: ok, ${runs:-?} executions (${speed:-?}/s, peak ${rss:-?} MB, corpus $corpus inputs)${analysed:+, analysed $analysed}, 0 findings"
  else
    failed=$((failed + 1))
    mkdir -p "build-fuzz/findings/$t"
    echo "fuzz_$t: FAILED (exit $rc) after ${runs:-?} executions, ${#findings[@]} finding(s):"
    for f in "${findings[@]}"; do
      cp "$f" "build-fuzz/findings/$t/"
      echo "  build-fuzz/findings/$t/$(basename "$f")  (reproduce: build-fuzz/fuzz_$t build-fuzz/findings/$t/$(basename "$f"))"
    done
    # The sanitizer's or the check's own report: from its first line, without libFuzzer's noise.
    awk '/==[0-9]+==|FUZZ_CHECK|runtime error|ERROR:/ { on = 1 } on' "$log" | head -40 | sed 's/^/  | /'
    cp "$log" "build-fuzz/findings/$t/log.txt"
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
