#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz) with clang, ASan and UBSan, and
# runs each from its seed corpus for a bounded time:
#
#   bench/fuzz.sh [--seconds N] [--build DIR] [--jobs J] [--max-len B] [HARNESS ...]
#   bench/fuzz.sh --seed S --runs N [HARNESS ...]   repeatable: a fixed seed, N inputs
#                                                    each, from the seeds only (CI)
#
# Default 60 s each (CI runs a short version through CTest, label fuzz). New
# inputs go to DIR/corpus/<harness> (the seeds in tests/fuzz/corpus are only
# read); a crash leaves its input in DIR/crashes/ and fails the run. Prints
# executions per harness, for docs/testing.md. --max-len caps the inputs the
# mutator makes (default: libFuzzer's, the largest seed; longer corpus files
# are read cut to it).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=60 BUILD=build-fuzz JOBS=1 SEED="" RUNS="" MAXLEN=""
HARNESSES=()
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) SECONDS_EACH=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --max-len) MAXLEN=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) HARNESSES+=("$1"); shift ;;
  esac
done
[ ${#HARNESSES[@]} -gt 0 ] || HARNESSES=(fuzz_wire fuzz_store_server fuzz_store_reply fuzz_topology_xml fuzz_config)
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is missing (scripts/setup.sh installs clang and libclang-rt-14-dev)"; exit 1; }
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  mkdir -p "$BUILD"
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DACCL_BUILD_FUZZERS=ON \
    -DACCL_BUILD_TESTS=OFF -DACCL_WITH_TORCH=OFF -DACCL_WITH_CUDA=OFF -DACCL_WITH_NCCL=OFF -DACCL_WITH_MPI=OFF \
    -DACCL_WITH_GLOO=OFF >"$BUILD/configure.log" 2>&1 || { tail -30 "$BUILD/configure.log"; exit 1; }
fi
cmake --build "$BUILD" -j"$(nproc)" --target fuzzers >"$BUILD/fuzz-build.log" 2>&1 || { tail -30 "$BUILD/fuzz-build.log"; exit 1; }
mkdir -p "$BUILD/crashes"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Long runs record no allocation stacks (a tenth of the slower harnesses'
# time went to unwinding every malloc): a finding's input is kept in crashes/,
# and `bin/HARNESS crashes/FILE` with the defaults reports it with its stacks.
[ -n "$SEED" ] || ASAN_OPTIONS=$ASAN_OPTIONS:malloc_context_size=0
# hwloc's libxml2 import plugin is unloaded when a topology is destroyed, so
# LeakSanitizer cannot name (or suppress) what it leaks: use hwloc's built-in
# XML parser, which it falls back to where the plugin is absent.
export HWLOC_LIBXML_IMPORT=0
export LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0
rc=0
printf "%-20s %12s %10s %8s %s\n" harness executions exec/s corpus result
for h in "${HARNESSES[@]}"; do
  seeds=()
  [ -d "tests/fuzz/corpus/$h" ] && seeds+=("tests/fuzz/corpus/$h")
  [ "$h" = fuzz_topology_xml ] && seeds+=(tests/fixtures/topologies)
  par=()
  [ "$JOBS" -gt 1 ] && par=(-jobs="$JOBS" -workers="$JOBS")
  [ -z "$MAXLEN" ] || par+=(-max_len="$MAXLEN")
  corpus=corpus/$h
  # Long runs go in segments of at most 30 minutes, each a fresh process that
  # goes on from the corpus: memory that a library leaks on malformed input
  # (the one suppressed leak, tests/fuzz/lsan.supp) is given back in between
  # instead of growing into the 2 GB limit over hours.
  SEGMENT=1800
  limit=(-max_total_time="$((SECONDS_EACH < SEGMENT ? SECONDS_EACH : SEGMENT))")
  if [ -n "$SEED" ]; then
    # Repeatable: the same seed and inputs give the same run, so a pass here
    # stays a pass (new findings come from the long, timed runs).
    corpus=corpus-seed$SEED/$h
    rm -rf "${BUILD:?}/$corpus"
    par+=(-seed="$SEED")
    limit=(-runs="${RUNS:-10000}")
  fi
  mkdir -p "$BUILD/$corpus"
  log=$BUILD/$h.log
  : >"$log"
  set +e
  start=$(date +%s)
  execs=0
  while :; do
    # SIGUSR1 ignored: accl-diag --live asks every ACCL process of the host to
    # dump with it, and libFuzzer's own handler would end a long run.
    (cd "$BUILD" && trap '' USR1 && exec "bin/$h" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -handle_usr1=0 "${par[@]}" \
      -artifact_prefix="crashes/$h-" -print_final_stats=1 "$corpus" "${seeds[@]/#/$OLDPWD/}") >"$log.part" 2>&1
    r=$?
    cat "$log.part" >>"$log"
    # Each log's last count (a crash prints the final stats twice).
    for f in "$log.part" "$BUILD"/fuzz-[0-9]*.log; do
      [ -f "$f" ] || continue
      execs=$((execs + $( (grep -a "stat::number_of_executed_units" "$f" || true) | tail -1 | awk '{n = $2} END {print n + 0}') ))
    done
    rm -f "$BUILD"/fuzz-[0-9]*.log
    # A timed run on a loaded machine: an input that took over the 10 s limit
    # only because the fuzzer was starved of CPU runs in well under a second
    # alone. That is not a hang: its artifact is set aside and the run goes on
    # from its corpus for the time left.
    art=$(sed -n "s/.*Test unit written to \(crashes\/$h-timeout-[0-9a-f]*\).*/\1/p" "$log.part" | tail -1)
    left=$((SECONDS_EACH - ($(date +%s) - start)))
    next=$((left < SEGMENT ? left : SEGMENT))
    if [ -z "$SEED" ] && [ $r -eq 0 ] && [ "$left" -gt 10 ]; then
      limit=(-max_total_time="$next")  # the next segment
      continue
    fi
    [ -z "$SEED" ] && [ $r -ne 0 ] && [ -n "$art" ] && [ "$left" -gt 10 ] || break
    # CPU time, not wall time: the rerun may be starved as well.
    cpu=$( { TIMEFORMAT='%3U %3S'; time (cd "$BUILD" && timeout 120 "bin/$h" "$art" >/dev/null 2>&1); } 2>&1 ) || break
    ms=$(echo "$cpu" | awk '{printf "%d", ($1 + $2) * 1000}')
    [ "$ms" -lt 2000 ] || break
    echo "fuzz.sh: $h: a timeout on an input that takes $ms ms of CPU alone: the machine starved the fuzzer; going on for ${left} s" | tee -a "$log"
    mv "$BUILD/$art" "$BUILD/crashes/starved-${art#crashes/}"
    limit=(-max_total_time="$next")
  done
  rm -f "$log.part"
  set -e
  secs=$(($(date +%s) - start))
  [ "$secs" -gt 0 ] || secs=1
  files=$(ls "$BUILD/$corpus" | wc -l)
  if [ $r -eq 0 ]; then res="0 crashes"; else res="FAILED (exit $r; $BUILD/$h.log, $BUILD/crashes/)"; rc=1; fi
  printf "%-20s %12s %10s %8s %s\n" "$h" "$execs" "$((execs / secs))" "$files" "$res"
  [ $r -eq 0 ] || tail -40 "$log"
done
exit $rc
