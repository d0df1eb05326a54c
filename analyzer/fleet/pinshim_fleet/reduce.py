"""The reduce step: the map tasks' partial tables combined on the cluster
in a tree of tasks (tasks.combine, FAN_IN partials each), then the one
remaining partial, which is small (a row per site, rule, program, host or
memory kind), turned into the fleet tables with pandas."""
import pandas as pd

from pinshim_fleet import tasks

FAN_IN = 16


def combine_on_cluster(client, futures):
    """One future holding the combination of all `futures`' partials."""
    level = list(futures)
    while len(level) > 1:
        level = [client.submit(tasks.combine, level[i:i + FAN_IN], pure=False)
                 for i in range(0, len(level), FAN_IN)]
    return level[0]


def _top_sites(p):
    rules = p["site_rules"]
    top = rules.groupby("site_id").agg({"findings": "sum", "loss": "sum"})
    top = top.rename(columns={"loss": "estimated_seconds_lost"})
    per_site = p["site_processes"].set_index("site_id")
    top["processes"] = per_site["processes"].reindex(top.index).fillna(0).astype("int64")
    top["programs"] = p["site_programs"].groupby("site_id").size().reindex(top.index)
    top["hosts"] = p["site_hosts"].groupby("site_id").size().reindex(top.index)
    top["rules"] = rules.groupby("site_id")["rule"].apply(lambda s: " ".join(sorted(set(s))))
    top["short"] = per_site["site_short"].reindex(top.index)
    defs = p["sites"].set_index("site")
    for column in ("kind", "build_id", "function", "file", "line"):
        top[column] = defs[column].reindex(top.index)
    copies = p["site_copies"].set_index("site").reindex(top.index)
    top["copies"] = copies["copies"].fillna(0).astype("int64")
    top["copy_bytes"] = copies["bytes"].fillna(0).astype("int64")
    top = top.reset_index().rename(columns={"site_id": "site"})
    top["site"] = top["site"].where(~top["site"].str.startswith("?"), None)
    return top.sort_values(["estimated_seconds_lost", "findings"], ascending=False,
                           ignore_index=True)


def _hosts(p):
    hosts = p["hosts"].set_index("host")
    peak = p["host_buckets"].groupby("host")["pinned_bytes"].max()
    hosts["peak_pinned_bytes"] = peak.reindex(hosts.index).fillna(0).astype("int64")
    hosts["share_of_node_budget"] = hosts["peak_pinned_bytes"] / hosts["node_budget_bytes"]
    return hosts.reset_index().sort_values(["peak_pinned_bytes", "host"],
                                           ascending=[False, True], ignore_index=True)


def _bandwidth(p):
    bw = p["bandwidth"].copy()
    bw["gb_per_second_in_calls"] = (bw["bytes"] / bw["call_seconds"].where(bw["call_seconds"] > 0)
                                    / 1e9)
    return bw.sort_values("bytes", ascending=False, ignore_index=True)


def finish(p):
    """The fleet tables (pandas) and totals from the combined partial."""
    rules = p["rules"].rename(columns={"loss": "estimated_seconds_lost"})
    rules["processes"] = rules["rule"].map(p["rule_processes"].set_index("rule")["processes"])
    programs = p["programs"].rename(columns={"loss": "estimated_seconds_lost"})
    sums = p["totals"].sum(numeric_only=True)
    problems = p["problems"].sort_values("trace", ignore_index=True)
    totals = {
        "processes": int(sums.get("processes", 0)),
        "copies": int(sums.get("copies", 0)),
        "failed_copies": int(sums.get("failed_copies", 0)),
        "copy_bytes": int(sums.get("copy_bytes", 0)),
        "findings": int(sums.get("findings", 0)),
        "estimated_seconds_lost": float(sums.get("estimated_seconds_lost", 0.0)),
        "findings_by_severity": {s: int(n) for s, n in
                                 rules.groupby("severity")["findings"].sum().items()},
        "findings_by_rule": {r: int(n) for r, n in
                             rules.groupby("rule")["findings"].sum().items()},
        "incomplete_traces": int(sums.get("incomplete", 0)),
        "unreadable_traces": int(len(problems)),
    }
    return {
        "totals": totals,
        "top_sites": _top_sites(p),
        "findings_by_rule": rules.sort_values("estimated_seconds_lost", ascending=False,
                                              ignore_index=True),
        "findings_by_program": programs.sort_values(["program", "estimated_seconds_lost"],
                                                    ascending=[True, False], ignore_index=True),
        "host_pinned": _hosts(p),
        "bandwidth": _bandwidth(p),
        "problems": problems,
    }


def as_records(df):
    """Rows as plain dicts with JSON's null for pandas' missing values."""
    clean = df.astype(object).where(pd.notna(df), None)
    return clean.to_dict(orient="records")
