#!/usr/bin/env python3
"""The side-by-side table of bench/run_cpu_benches.sh and
bench/gpu/page_bench.sh: Google Benchmark JSON files named
LABEL.MODE.ROUND.json (MODE: with or without the library) in one folder,
read into one row per benchmark, with its target and verdict.

    python3 bench/side_by_side.py FOLDER

A benchmark NAME with a twin NAME/libc (bench/page: the same call made
straight into libc in the same process) gets a second table: the hook's
cost measured inside one run (NAME - NAME/libc with the library, paired by
round), free of the drift between processes, and the same difference
without the library (where both rows call libc: it shows the two rows'
own offset, which should be about 0).
"""
import glob, json, os, statistics, sys

work = sys.argv[1]
# Added nanoseconds allowed, by benchmark name prefix.
targets = {"BM_MemcpyHtoD/": 50.0, "BM_MemcpyHtoDAsync/": 50.0, "BM_MallocFree/64": 5.0,
           "BM_Madvise": 10.0, "BM_Mmap": 10.0, "BM_Munmap": 10.0}
scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}

rounds = {}  # (name, mode) -> {round: median in ns}
order = []
for path in sorted(glob.glob(os.path.join(work, "*.json"))):
    label, mode, rnd = os.path.basename(path).split(".")[:3]
    with open(path) as f:
        text = f.read()
    if not text.strip():
        continue  # BENCH_FILTER matched nothing in that binary
    data = json.loads(text)
    for b in data.get("benchmarks", []):
        if b.get("run_type") != "aggregate" or b.get("aggregate_name") != "median":
            continue
        name = b["run_name"] if label == "malloc" else "%s: %s" % (label, b["run_name"])
        if b.get("label"):
            name += " (%s)" % b["label"]
        if name not in order:
            order.append(name)
        rounds.setdefault((name, mode), {})[int(rnd)] = b["cpu_time"] * scale[b.get("time_unit", "ns")]

def target_for(name):
    bare = name.split(": ", 1)[-1]
    for prefix, t in targets.items():
        if bare == prefix or bare.startswith(prefix):
            return t
    return None

def spread_of(diffs):
    # How far apart the rounds' differences were (the middle half of them
    # with 4 or more rounds): added figures smaller than this are noise.
    if len(diffs) >= 4:
        q = len(diffs) // 4
        return diffs[-1 - q] - diffs[q]
    return diffs[-1] - diffs[0]

def print_table(rows):
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))

twins = [n for n in order if n.endswith("/libc") and n[:-len("/libc")] in order]
rows = [("benchmark", "without ns", "with ns", "added ns", "spread ns", "target", "verdict")]
missed = met = noisy_missed = 0
for name in order:
    if name in twins:
        continue
    wo_by, wi_by = rounds.get((name, "without"), {}), rounds.get((name, "with"), {})
    paired = sorted(set(wo_by) & set(wi_by))
    if not paired:
        continue
    wo = [wo_by[r] for r in paired]
    wi = [wi_by[r] for r in paired]
    m_wo, m_wi = statistics.median(wo), statistics.median(wi)
    # Each round ran both sides back to back: the added time is the median
    # of the rounds' differences, which cancels drift between rounds.
    diffs = sorted(b - a for a, b in zip(wo, wi))
    added = statistics.median(diffs)
    spread = spread_of(diffs)
    t = target_for(name)
    verdict = "-" if t is None else ("met" if added <= t else "NOT MET")
    missed += verdict == "NOT MET"
    met += verdict == "met"
    if t is not None and spread > t:
        verdict += " (noise > target)"
        noisy_missed += verdict.startswith("NOT MET")
    rows.append((name, "%.1f" % m_wo, "%.1f" % m_wi, "%+.1f" % added, "%.1f" % spread,
                 "-" if t is None else "<= %g" % t, verdict))
print_table(rows)
print("CPU time per iteration: Google Benchmark's median over the repetitions of a run, then "
      "the median over rounds; added: the median of the rounds' differences (with - without, "
      "run back to back); spread: the interquartile range of those differences (their range "
      "with fewer than 4 rounds). BM_MallocFreeBatch64 is per 64 pairs.")
print("targets: %d met, %d not met (%d of these with round-to-round noise larger than the target)"
      % (met, missed, noisy_missed))

if twins:
    print()
    print("In one process: the call through the hooks against the same call straight into libc")
    rows = [("benchmark", "hooked ns", "libc ns", "added ns", "spread ns", "offset without ns",
             "target", "verdict")]
    in_met = in_missed = 0
    for twin in twins:
        name = twin[:-len("/libc")]
        def diffs_in(mode):
            a, b = rounds.get((name, mode), {}), rounds.get((twin, mode), {})
            paired = sorted(set(a) & set(b))
            return sorted(a[r] - b[r] for r in paired), [a[r] for r in paired], [b[r] for r in paired]
        d_wi, hooked, libc = diffs_in("with")
        d_wo, _, _ = diffs_in("without")
        if not d_wi:
            continue
        added = statistics.median(d_wi)
        t = target_for(name)
        verdict = "-" if t is None else ("met" if added <= t else "NOT MET")
        in_met += verdict == "met"
        in_missed += verdict == "NOT MET"
        rows.append((name, "%.1f" % statistics.median(hooked), "%.1f" % statistics.median(libc),
                     "%+.1f" % added, "%.1f" % spread_of(d_wi),
                     "%+.1f" % statistics.median(d_wo) if d_wo else "-",
                     "-" if t is None else "<= %g" % t, verdict))
    print_table(rows)
    print("added: the median over rounds (with the library) of hooked - libc; offset without: "
          "the same difference without the library, where both rows call libc.")
    print("targets in one process: %d met, %d not met" % (in_met, in_missed))
