"""The fleet's HTML page: one self-contained file, no script, nothing
loaded from elsewhere (its Content-Security-Policy allows inline style
only), charts drawn as inline SVG."""
import html
import math

CSP = "default-src 'none'; style-src 'unsafe-inline'"

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1f2328; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; }
.cards div { background: #f6f8fa; border-radius: 6px; padding: 8px 14px; }
.cards b { display: block; font-size: 18px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border-bottom: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #57606a; } .warn { color: #9a6700; } .over { color: #cf222e; font-weight: 600; }
svg text { font: 11px system-ui, sans-serif; }
"""


def esc(value):
    return html.escape("" if value is None else str(value), quote=True)


def missing(value):
    return value is None or (isinstance(value, float) and math.isnan(value))


def size(n):
    if missing(n):
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%.0f %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024
    return ""


def seconds(s):
    if missing(s):
        return "-"
    s = float(s)
    if s >= 3600:
        return "%.1f h" % (s / 3600)
    if s >= 60:
        return "%.1f min" % (s / 60)
    if s >= 1:
        return "%.2f s" % s
    return "%.1f ms" % (s * 1e3)


def count(n):
    return "-" if missing(n) else "{:,}".format(int(n))


def table(headers, rows):
    """headers: (title, numeric); rows: lists of already formatted cells."""
    out = ["<table><thead><tr>"]
    out += ["<th>%s</th>" % esc(h) for h, _ in headers]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>" + "".join(
            "<td%s>%s</td>" % (' class="n"' if numeric else "", cell)
            for (_, numeric), cell in zip(headers, row)) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def bars(items, limit_of=None, width=640, fmt=size):
    """Horizontal bars: items are (label, value); limit_of(label) draws a
    red mark at that value (a budget), when it returns one."""
    items = [(l, v) for l, v in items if not missing(v)][:40]
    if not items:
        return ""
    top = max([v for _, v in items] + [limit_of(l) or 0 for l, _ in items] if limit_of else
              [v for _, v in items]) or 1
    row_h, label_w = 18, 200
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img">'
           % (width, row_h * len(items) + 4)]
    for i, (label, value) in enumerate(items):
        y = i * row_h + 2
        w = (width - label_w - 90) * value / top
        out.append('<text x="0" y="%d">%s</text>' % (y + 12, esc(str(label)[:30])))
        out.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="#1f77b4"/>'
                   % (label_w, y + 2, max(w, 1), row_h - 6))
        out.append('<text x="%.1f" y="%d">%s</text>' % (label_w + w + 4, y + 12, esc(fmt(value))))
        limit = limit_of(label) if limit_of else None
        if limit:
            x = label_w + (width - label_w - 90) * limit / top
            out.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#d62728" '
                       'stroke-width="2"/>' % (x, x, y, y + row_h - 2))
    out.append("</svg>")
    return "".join(out)


def site_name(row):
    return esc(row.get("short") or "unknown site")


def render(result, stats):
    t = result["totals"]
    out = ['<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
           '<meta http-equiv="Content-Security-Policy" content="%s">' % CSP,
           "<title>pinshim fleet</title><style>%s</style></head><body>" % STYLE,
           "<h1>pinshim fleet</h1>", '<div class="cards">']
    sev = t["findings_by_severity"]
    for value, label in ((count(t["processes"]), "processes"),
                         (count(stats.get("hosts", 0)), "hosts"),
                         (count(t["copies"]), "copies"), (size(t["copy_bytes"]), "moved"),
                         (count(t["findings"]), "findings"),
                         ("%d / %d / %d" % (sev.get("error", 0), sev.get("warning", 0),
                                            sev.get("info", 0)), "errors / warnings / info"),
                         (seconds(t["estimated_seconds_lost"]), "estimated time lost"),
                         (count(t["unreadable_traces"]), "unreadable traces")):
        out.append("<div><b>%s</b>%s</div>" % (esc(value), esc(label)))
    out.append("</div>")
    out.append('<p class="note">%s traces analyzed by pinshim export on %s Dask workers in %s.</p>'
               % (count(stats.get("traces", 0)), count(stats.get("workers", 0)),
                  seconds(stats.get("seconds_total", 0))))
    out += _sites_section(result["top_sites"])
    out += _findings_section(result)
    out += _hosts_section(result["host_pinned"])
    out += _bandwidth_section(result["bandwidth"])
    out += _problems_section(result["problems"])
    out.append("</body></html>\n")
    return "".join(out)


def _sites_section(top):
    rows = top.head(100).to_dict(orient="records")
    out = ["<h2>Top call sites fleet-wide, by estimated time lost</h2>"]
    if not rows:
        return out + ['<p class="note">No findings.</p>']
    out.append(bars([(r.get("short") or "unknown site", r["estimated_seconds_lost"])
                     for r in rows[:20]], fmt=seconds))
    out.append(table(
        [("site", False), ("rules", False), ("time lost", True), ("findings", True),
         ("processes", True), ("programs", True), ("hosts", True), ("copies", True),
         ("bytes", True), ("key", False)],
        [[site_name(r), esc(r["rules"]), seconds(r["estimated_seconds_lost"]),
          count(r["findings"]), count(r["processes"]), count(r["programs"]), count(r["hosts"]),
          count(r["copies"]), size(r["copy_bytes"]), "<code>%s</code>" % esc(r["site"] or "-")]
         for r in rows]))
    if len(top) > len(rows):
        out.append('<p class="note">%s more sites not shown (top_sites.jsonl has them all).</p>'
                   % count(len(top) - len(rows)))
    return out


def _findings_section(result):
    rules = result["findings_by_rule"].to_dict(orient="records")
    out = ["<h2>Findings by rule</h2>",
           table([("rule", False), ("severity", False), ("findings", True), ("processes", True),
                  ("time lost", True)],
                 [[esc(r["rule"]), esc(r["severity"]), count(r["findings"]),
                   count(r["processes"]), seconds(r["estimated_seconds_lost"])] for r in rules])]
    programs = result["findings_by_program"].head(300).to_dict(orient="records")
    out.append("<h2>Findings by program</h2>")
    out.append(table([("program", False), ("rule", False), ("findings", True), ("time lost", True)],
                     [[esc(r["program"]), esc(r["rule"]), count(r["findings"]),
                       seconds(r["estimated_seconds_lost"])] for r in programs]))
    return out


def _hosts_section(hosts):
    rows = hosts.to_dict(orient="records")
    budgets = {r["host"]: (None if missing(r["node_budget_bytes"]) else r["node_budget_bytes"])
               for r in rows}
    out = ["<h2>Pinned memory per host against its node budget</h2>",
           '<p class="note">Peak: the largest sum, over one wall-clock second, of each process\'s '
           "largest pinned bytes in that second (sampled); the red mark is the node budget of "
           "enforce mode, where one was set.</p>",
           bars([(r["host"], r["peak_pinned_bytes"]) for r in rows], budgets.get)]

    def share(r):
        v = r["share_of_node_budget"]
        if missing(v):
            return "-"
        return '<span class="%s">%.0f%%</span>' % ("over" if v > 1 else "", 100 * v)

    out.append(table([("host", False), ("processes", True), ("peak pinned", True),
                      ("largest process peak", True), ("node budget", True), ("of budget", True)],
                     [[esc(r["host"]), count(r["processes"]), size(r["peak_pinned_bytes"]),
                       size(r["largest_process_peak_bytes"]), size(r["node_budget_bytes"]),
                       share(r)] for r in rows[:500]]))
    return out


def _bandwidth_section(bw):
    rows = bw.to_dict(orient="records")
    out = ["<h2>Copy bandwidth by memory kind</h2>",
           '<p class="note">Bytes moved per second of time inside the copy calls; an '
           "asynchronous call returns before its copy ends, so its rate is an upper bound.</p>",
           bars([("%s %s" % (r["direction"], r["memory"]), r["gb_per_second_in_calls"])
                 for r in rows], fmt=lambda v: "%.1f GB/s" % v)]
    out.append(table([("direction", False), ("memory", False), ("copies", True),
                      ("asynchronous", True), ("failed", True), ("bytes", True),
                      ("time in calls", True), ("GB/s", True)],
                     [[esc(r["direction"]), esc(r["memory"]), count(r["copies"]),
                       count(r["async_copies"]), count(r["failed"]), size(r["bytes"]),
                       seconds(r["call_seconds"]),
                       "-" if missing(r["gb_per_second_in_calls"])
                       else "%.2f" % r["gb_per_second_in_calls"]] for r in rows]))
    return out


def _problems_section(problems):
    rows = problems.to_dict(orient="records")
    out = ["<h2>Traces that could not be read</h2>"]
    if not rows:
        return out + ['<p class="note">None.</p>']
    out.append("<ul>")
    out += ['<li class="warn">%s</li>' % esc(r["problem"]) for r in rows[:1000]]
    out.append("</ul>")
    return out
