#!/usr/bin/env python3
"""Reduces bench/gpu/matrix.sh's raw lines to one table: for every cell and
every variant beside "none" (no pinshim), the median of the per-round ratios
variant/none with their spread (lowest and highest round; a DataLoader
step's host-time parts are shown too, not judged), then the issue's
targets, and any cell whose results differ between variants.

    python3 bench/gpu/matrix_table.py RAW

A ratio above 1 means the variant is faster. Rates (GB/s, images/s) are
divided as they are; times (step_us) are inverted first. A row is marked
SLOWER when its median ratio is below 0.98."""
import collections
import statistics
import sys

RATES = ("h2d_gbps", "d2h_gbps", "images_per_s")
TIMES = ("step_us",)
# Host time of a DataLoader step's parts (medians over its steps): shown
# beside the rates to tell where a loop's time went, never counted as rows.
PHASES = ("fetch_us", "upload_us", "train_us", "fetch_flt")
NEVER_SLOWER = 0.98


def parse(path):
    rows = collections.defaultdict(dict)  # (cell, variant) -> {round: fields}
    for line in open(path, errors="replace"):
        fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        if "cell" not in fields or "round" not in fields or "variant" not in fields:
            continue
        key, rnd = (fields["cell"], fields["variant"]), int(fields["round"])
        if rnd in rows[key]:
            # One cell twice in a round would hide one of its runs.
            sys.exit("matrix_table: cell %s (%s) twice in round %d" % (key[0], key[1], rnd))
        rows[key][rnd] = fields
    return rows


def ratios(a, b, metric):
    """Per-round ratios a/b of one metric (speed: times inverted)."""
    out = []
    for r in sorted(set(a) & set(b)):
        x, y = a[r].get(metric), b[r].get(metric)
        if x is None or y is None or float(x) <= 0 or float(y) <= 0:
            continue
        out.append(float(y) / float(x) if metric in TIMES + PHASES else float(x) / float(y))
    return out


def fmt(rs):
    return "%.3f [%.3f-%.3f] n=%d" % (statistics.median(rs), min(rs), max(rs), len(rs))


def med(d, metric):
    vals = [float(f[metric]) for f in d.values() if metric in f]
    return statistics.median(vals) if vals else None


def main():
    rows = parse(sys.argv[1])
    cells = list(dict.fromkeys(c for c, _ in rows))
    variants = [v for v in dict.fromkeys(v for _, v in rows) if v != "none"]
    slower = []
    print("%-34s %-12s %9s %9s  %s" % ("cell", "metric", "none", "variant", "ratio per round: median [min-max]"))
    for v in variants:
        print("== %s against none" % v)
        for c in cells:
            base, var = rows.get((c, "none")), rows.get((c, v))
            if not base or not var:
                continue
            for m in RATES + TIMES + PHASES:
                rs = ratios(var, base, m)
                if not rs:
                    # A part that is 0 on one side (no page fault in a
                    # fetch) has no ratio; its medians still say where.
                    if m in PHASES and med(base, m) is not None and med(var, m) is not None:
                        print("%-34s %-12s %9.2f %9.2f  -" % (c, m, med(base, m), med(var, m)))
                    continue
                mark = ""
                if m not in PHASES and statistics.median(rs) < NEVER_SLOWER:
                    mark = "  SLOWER"
                    slower.append((v, c, m))
                print("%-34s %-12s %9.2f %9.2f  %s%s" % (c, m, med(base, m), med(var, m), fmt(rs), mark))
    print()
    print("== targets (optimize)")
    targets(rows)
    print()
    differ = []
    for c in cells:
        sums = {f.get("checksum") for (cc, v), d in rows.items() if cc == c for f in d.values()}
        sums.discard(None)
        if len(sums) > 1:
            differ.append(c)
    print("results differ between runs: %s" % (", ".join(differ) if differ else "none"))
    print("rows below %.2f of the driver: %d%s" % (NEVER_SLOWER, len(slower),
          "".join("\n  %s %s %s" % s for s in slower)))


def target(label, rs, goal):
    if not rs:
        print("%-58s no data" % label)
        return
    verdict = "met" if statistics.median(rs) >= goal else "NOT MET"
    print("%-58s %s  (target %.2f) %s" % (label, fmt(rs), goal, verdict))


def targets(rows):
    opt = lambda c: rows.get((c, "optimize"), {})
    none = lambda c: rows.get((c, "none"), {})
    mib = 1 << 20
    for s in (1, 4):
        for k in ("sync", "async"):
            c = "fresh:%d:%s" % (s * mib, k)
            target("fresh %d MiB %s upload vs driver" % (s, k), ratios(opt(c), none(c), "h2d_gbps"), 1.0)
        c = "cold:%d" % (s * mib)
        target("first 8 uploads of %d MiB vs driver" % s, ratios(opt(c), none(c), "h2d_gbps"), 1.0)
    for s in (64, 256):
        for k in ("sync", "async"):
            c = "fresh:%d:%s" % (s * mib, k)
            for m in ("h2d_gbps", "d2h_gbps"):
                vals = [float(f[m]) for f in opt(c).values() if m in f]
                label = "fresh %d MiB %s %s GB/s (absolute)" % (s, k, m[:3])
                if vals:
                    goal = 30.0
                    print("%-58s %.1f [%.1f-%.1f] n=%d  (target %.0f) %s" % (
                        label, statistics.median(vals), min(vals), max(vals), len(vals), goal,
                        "met" if statistics.median(vals) >= goal else "NOT MET"))
    for b in (5, 32, 112):
        for w in (0, 2, 4):
            target("DataLoader b=%d w=%d: optimize nopin vs none pin" % (b, w),
                   ratios(opt("dataloader:%d:%d:nopin" % (b, w)), none("dataloader:%d:%d:pin" % (b, w)),
                          "images_per_s"), 0.95)
    for b in (5, 32, 112):
        for w in (0, 2, 4):
            target("DataLoader b=%d w=%d: optimize nopinnb vs none pin" % (b, w),
                   ratios(opt("dataloader:%d:%d:nopinnb" % (b, w)),
                          none("dataloader:%d:%d:pin" % (b, w)), "images_per_s"), 0.95)
    for b, w in ((5, 2), (5, 4), (32, 2), (32, 4)):
        for m, what in (("nocopy", "no copies at all"), ("syncnocopy", "nopin's waits, no copies")):
            target("DataLoader b=%d w=%d: %s (none) vs none pin" % (b, w, what),
                   ratios(none("dataloader:%d:%d:%s" % (b, w, m)),
                          none("dataloader:%d:%d:pin" % (b, w)), "images_per_s"), 0.95)
    target("64 MiB reused 30 times vs hand-pinned (whole loop)",
           ratios(opt("reuse:%d:30" % (64 * mib)), none("pinned:%d:30" % (64 * mib)), "step_us"), 0.95)
    for m in ("h2d_gbps", "d2h_gbps"):
        target("bandwidthTest-style 32 MiB %s vs pinned" % m[:3],
               ratios(opt("bw:%d" % (32 * mib)), none("bwpinned:%d" % (32 * mib)), m), 0.9)


if __name__ == "__main__":
    main()
