#!/usr/bin/env python3
"""The side-by-side table of bench/run_cpu_benches.sh and
bench/gpu/page_bench.sh: Google Benchmark JSON files named
LABEL.MODE.ROUND.json (MODE: with or without the library) in one folder,
read into one row per benchmark, with its target and verdict.

    python3 bench/side_by_side.py FOLDER
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

rows = [("benchmark", "without ns", "with ns", "added ns", "spread ns", "target", "verdict")]
missed = met = noisy_missed = 0
for name in order:
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
    # How far apart the rounds' differences were (the middle half of them
    # with 4 or more rounds): added figures smaller than this are noise.
    if len(diffs) >= 4:
        q = len(diffs) // 4
        spread = diffs[-1 - q] - diffs[q]
    else:
        spread = diffs[-1] - diffs[0]
    t = target_for(name)
    verdict = "-" if t is None else ("met" if added <= t else "NOT MET")
    missed += verdict == "NOT MET"
    met += verdict == "met"
    if t is not None and spread > t:
        verdict += " (noise > target)"
        noisy_missed += verdict.startswith("NOT MET")
    rows.append((name, "%.1f" % m_wo, "%.1f" % m_wi, "%+.1f" % added, "%.1f" % spread,
                 "-" if t is None else "<= %g" % t, verdict))
widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
for r in rows:
    print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
print("CPU time per iteration: Google Benchmark's median over the repetitions of a run, then "
      "the median over rounds; added: the median of the rounds' differences (with - without, "
      "run back to back); spread: the interquartile range of those differences (their range "
      "with fewer than 4 rounds). BM_MallocFreeBatch64 is per 64 pairs.")
print("targets: %d met, %d not met (%d of these with round-to-round noise larger than the target)"
      % (met, missed, noisy_missed))
