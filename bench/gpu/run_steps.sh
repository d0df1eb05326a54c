#!/usr/bin/env bash
# Named parts of the GPU work, one after another within a time budget, for a
# GPU machine lent for a short slot: each step gets at most its own limit and
# never more than what is left of TOTAL_S (a step that would start with less
# than 30 s left is skipped and says so). From the repository root of a
# checkout, with .gpu/ staged by scripts/gpu_bundle.sh:
#   bash bench/gpu/run_steps.sh OUTDIR TOTAL_S STEP:MAX_S ...
# Each step's log goes to OUTDIR/<step>.txt, its last lines to stdout, and
# OUTDIR/results.tgz is rewritten after every step (what finished survives a
# cut-off). Steps:
#   facts      page_facts, every fact but the capture ones
#   capfacts   page_facts sections, each in its own process
#              (CAPFACTS="capture capture_unregistered_h2d ...", the default
#              those three plus the capture_then_register ones and
#              sync_h2d_return)
#   tier       the GPU tier and the misuse programs (run_all.sh, benchmarks
#              skipped)
#   hazards    the hazard suite on the real driver
#   guard      tests/gpu/copy_guard_check.sh (the copy guard's programs)
#   vmm        the GPU tier's VMM and host-pool rows, without cpu_tests.txt's
#              tests (VMM_TIER, default
#              "vmm_host host_pool vmm_edges pool_edges"), then, unless
#              VMM_PROBE=0 or the limit is under 150 s, vmm_host_probe.sh
#              (its files in OUTDIR/vmm)
#   page       page_bench.sh (PAGE_ROUNDS, default 9)
#   stage      stage_bench.sh (STAGE_SECTIONS, default "1 2 3 4 5 7";
#              STAGE_ROUNDS, default 3; STAGE_SWEEP / STAGE_SWEEP_SIZES for
#              section 6)
#   bisect     dataloader_bisect.sh (BISECT_ROUNDS, default 3)
#   optimize   optimize_bench.sh
#   diag       fresh buffers (DIAG_SIZES, default 1, 4 and 256 MiB) both
#              ways, without the library and under optimize mode with its
#              summary (where staging spent its time); alloc_loop with a
#              copy, each call timed (percentiles), without and with it
#   pairs      alloc_loop with a copy under optimize mode with a trace: the
#              allocation + free pairs as pinshim report times them
#   matrix     matrix.sh with MATRIX_ROUNDS (default 8) rounds and the
#              MATRIX_* settings of the environment, into OUTDIR/matrix; cut
#              off by its limit, the table is made from the rounds that ended
#   handoff    handoff_probe (bench/copy): 64 KiB pieces of a 1 MiB buffer
#              (HANDOFF_BYTES) copied by spinning workers, per source state
#              and copy routine; no GPU, the host's cores
set -u
OUTDIR="$(mkdir -p "$1" && cd "$1" && pwd)"
TOTAL="$2"
shift 2
LIBDIR="$PWD/.gpu"
T0=$(date +%s)
left() { echo $((TOTAL - ($(date +%s) - T0) - 25)); }
for s in "$@"; do
  name=${s%%:*}
  max=${s##*:}
  l=$(left)
  if ((l < 30)); then
    echo "skip $name (${l}s left)"
    continue
  fi
  ((max > l)) && max=$l
  t=$(date +%s)
  log="$OUTDIR/$name.txt"
  echo "== $name (limit ${max}s)"
  case $name in
    facts)
      nvcc -O2 -gencode arch=compute_90,code=sm_90 -o /tmp/page_facts bench/gpu/page_facts.cu &&
        timeout "$max" /tmp/page_facts > "$log" 2>&1
      ;;
    capfacts)
      nvcc -O2 -gencode arch=compute_90,code=sm_90 -o /tmp/page_facts bench/gpu/page_facts.cu
      for a in ${CAPFACTS:-capture capture_unregistered_h2d capture_unregistered_d2h \
        capture_then_register_h2d capture_then_register_d2h sync_h2d_return}; do
        timeout 60 /tmp/page_facts "$a"
        echo "rc=$?"
      done > "$log" 2>&1
      ;;
    tier)
      OUT="$OUTDIR/tier" GPU_SKIP="bandwidth observe python_frames fork_check optimize \
dataloader_bisect page_facts arena_bench budget_bench page_call_bench pool_bench recorder_bench \
registry_bench" timeout "$max" bash bench/gpu/run_all.sh .gpu > "$log" 2>&1
      echo "rc=$?" >> "$log"
      ;;
    hazards)
      (. bench/gpu/bundle_env.sh "$LIBDIR" && cd .gpu/hazards &&
        LD_LIBRARY_PATH=../needed timeout "$max" python3 hazards_test.py ./hazard_program \
          ../libpinshim.so ../rules/analyzer/report/pinshim-report) > "$log" 2>&1
      ;;
    guard)
      timeout "$max" bash tests/gpu/copy_guard_check.sh .gpu > "$log" 2>&1
      echo "rc=$?" >> "$log"
      ;;
    vmm)
      (
        . bench/gpu/bundle_env.sh "$LIBDIR"
        # The bundle less cpu_tests.txt: the tier's programs only.
        lib2="$(mktemp -d)"
        ln -s "$LIBDIR"/* "$lib2"/ && rm -f "$lib2/cpu_tests.txt"
        GPU_TIER_ONLY="${VMM_TIER:-vmm_host host_pool vmm_edges pool_edges}" timeout 120 \
          bash tests/gpu/run_gpu_tier.sh "$lib2"
        echo "tier rc=$?"
        if [ "${VMM_PROBE:-1}" != 0 ] && ((max > 150)); then
          timeout $((max - 120)) bash bench/gpu/vmm_host_probe.sh .gpu "$OUTDIR/vmm"
          echo "probe rc=$?"
        fi
      ) > "$log" 2>&1
      ;;
    matrix)
      OUT="$OUTDIR" timeout "$max" bash bench/gpu/matrix.sh .gpu "${MATRIX_ROUNDS:-8}" > "$log" 2>&1
      if [ ! -s "$OUTDIR/matrix/table.txt" ]; then
        echo "cut off: the table of the rounds that ended" >> "$log"
        cat "$OUTDIR/matrix/raw.txt" "$OUTDIR"/matrix/py.*.txt 2>/dev/null |
          python3 bench/gpu/matrix_table.py /dev/stdin >> "$log" 2>&1
      fi
      ;;
    handoff)
      timeout "$max" .gpu/bench/handoff_probe "${HANDOFF_BYTES:-1048576}" "0 1 2 4 8 12" 200 \
        > "$log" 2>&1
      ;;
    page)
      timeout "$max" bash bench/gpu/page_bench.sh .gpu "${PAGE_ROUNDS:-9}" "$OUTDIR/pagejson" \
        > "$log" 2>&1
      ;;
    stage)
      timeout "$max" bash bench/gpu/stage_bench.sh .gpu "${STAGE_ROUNDS:-3}" > "$log" 2>&1
      ;;
    bisect)
      timeout "$max" bash bench/gpu/dataloader_bisect.sh .gpu "${BISECT_ROUNDS:-3}" > "$log" 2>&1
      ;;
    optimize)
      timeout "$max" bash bench/gpu/optimize_bench.sh .gpu > "$log" 2>&1
      ;;
    diag)
      (
        . bench/gpu/bundle_env.sh "$LIBDIR"
        nvcc -O2 -gencode arch=compute_90,code=sm_90 -o /tmp/stage_bench bench/gpu/stage_bench.cu \
          -lpthread || exit 1
        nvcc -O2 -gencode arch=compute_90,code=sm_90 -o /tmp/alloc_loop bench/gpu/alloc_loop.cu ||
          exit 1
        opt() { LD_PRELOAD="$LIBDIR/libpinshim.so" PINSHIM_MODE=optimize PINSHIM_SUMMARY=1 "$@"; }
        for d in h2d d2h; do
          for n in ${DIAG_SIZES:-1048576 4194304 268435456}; do
            echo "-- fresh $d $n: no library, then optimize with its summary (phases)"
            timeout 60 /tmp/stage_bench fresh $d 5 $n | grep fresh
            opt timeout 60 /tmp/stage_bench fresh $d 5 $n 2>&1 | grep -E "^fresh|optimize"
          done
        done
        for n in 4096 1048576 16777216; do
          echo "-- alloc_loop $n with a copy: no library (200 pairs), optimize (2000 after 4000)"
          timeout 60 /tmp/alloc_loop $n 200 copy 8 detail
          opt timeout 60 /tmp/alloc_loop $n 2000 copy 4000 detail 2>&1 | grep -v "^pinshim: [a-z]*:"
        done
        echo "-- the copies alone from one pinned block (the stream's pace), no library"
        timeout 60 /tmp/alloc_loop 4096 6000 copyonly 100 detail
        echo "-- the same, each copy followed by an event record"
        timeout 60 /tmp/alloc_loop 4096 6000 copyevent 100 detail
      ) > "$log" 2>&1
      ;;
    pairs)
      (
        . bench/gpu/bundle_env.sh "$LIBDIR"
        nvcc -O2 -gencode arch=compute_90,code=sm_90 -o /tmp/alloc_loop bench/gpu/alloc_loop.cu ||
          exit 1
        echo "alloc_loop with a copy, 4000 + 2000 pairs, as the trace times them (us)"
        echo "bytes pair-mean alloc-mean free-mean pair-median pairs; pairs that grew the pool, ms;"
        echo "   the others (served from what the pool held): pairs, mean, median"
        for n in 4096 1048576 16777216; do
          tr="$(mktemp -d)"
          LD_PRELOAD="$LIBDIR/libpinshim.so" PINSHIM_MODE=optimize PINSHIM_TRACE_DIR="$tr" \
            timeout 60 /tmp/alloc_loop $n 2000 copy 4000 > /dev/null
          "$LIBDIR/pinshim" report --format json "$tr" | python3 -c '
import json, sys
p = json.load(sys.stdin)["processes"][0]["optimize"]["pool"]
h = p["held_pair_us"] or {"mean": 0, "median": 0}
print(sys.argv[1], "%.3f %.3f %.3f %.3f" % (p["pair_us"]["mean"], p["alloc_us"]["mean"],
      p["free_us"]["mean"], p["pair_us"]["median"]), p["pairs"], "; %d %.1f; %d %.3f %.3f" % (
      p["growth_pairs"], p["growth_ms"], p["held_pairs"], h["mean"], h["median"]))' $n
        done
      ) > "$log" 2>&1
      ;;
    *)
      echo "unknown step '$name'" > "$log"
      ;;
  esac
  tail -40 "$log"
  echo "-- $name took $(($(date +%s) - t))s"
  tar czf "$OUTDIR/results.tgz" -C "$OUTDIR" --exclude results.tgz . 2>/dev/null
done
{
  nproc
  uptime
} | tee "$OUTDIR/machine.txt"
tar czf "$OUTDIR/results.tgz" -C "$OUTDIR" --exclude results.tgz . 2>/dev/null
