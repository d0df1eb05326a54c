"""The map and reduce steps, run on the Dask workers.

Map: `pinshim export` on a batch of traces, its tables read into pandas
DataFrames with fixed columns, and reduced at once to partial fleet tables
(PARTIALS), whose rows are keyed so that partials of any batches combine by
grouping on the keys again. A process lies in one batch, so counts of
processes add up exactly; hosts and programs per site are kept as distinct
pairs until the end.

Reduce: combine() merges any number of partials into one, in a tree of
tasks, so that the client receives one small partial."""
import json
import os
import resource
import shutil
import subprocess
import tempfile

import pandas as pd

EXPORT_SCHEMA_VERSION = 1

# The columns each fleet table keeps from the export (docs/fleet.md), with
# their dtypes; "object" is text, float64 also holds the nulls of counts.
COLUMNS = {
    "processes": {"process": "object", "trace": "object", "host": "object",
                  "program": "object", "pid": "int64", "mode": "object",
                  "start_unix_ns": "float64", "duration_seconds": "float64",
                  "budget_bytes": "float64", "node_budget_bytes": "float64",
                  "copies": "int64", "failed_copies": "int64", "copy_bytes": "int64",
                  "peak_pinned_bytes": "int64", "findings": "int64",
                  "estimated_seconds_lost": "float64", "trace_complete": "bool"},
    "sites": {"site": "object", "kind": "object", "build_id": "object", "function": "object",
              "file": "object", "line": "float64", "short": "object"},
    "copies": {"process": "object", "host": "object", "program": "object", "site": "object",
               "direction": "object", "memory": "object", "copies": "int64", "failed": "int64",
               "async_copies": "int64", "bytes": "int64", "call_seconds": "float64"},
    "pinned_sites": {"process": "object", "site": "object", "allocations": "int64",
                     "registrations": "int64", "bytes": "int64", "largest_bytes": "int64"},
    "findings": {"process": "object", "host": "object", "program": "object", "rule": "object",
                 "severity": "object", "site": "object", "site_short": "object",
                 "estimated_seconds_lost": "float64", "counted_seconds_lost": "float64"},
    # Per host and wall-clock bucket (HOST_BUCKET_SECONDS): the pinned bytes
    # of the batch's processes there, each process's largest in it, summed.
    "host_seconds": {"host": "object", "bucket": "int64", "pinned_bytes": "int64"},
    "problems": {"trace": "object", "problem": "object"},
}

TABLES = list(COLUMNS)

HOST_BUCKET_SECONDS = 10


def empty(table):
    """An empty frame of the table's columns and dtypes (Dask's meta)."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in COLUMNS[table].items()})


def _frame(table, rows):
    if not rows:
        return empty(table)
    df = pd.DataFrame.from_records(rows)
    for column, dtype in COLUMNS[table].items():
        if column not in df:
            df[column] = None
        if dtype == "object":
            df[column] = df[column].astype(object).where(df[column].notna(), None)
        elif dtype == "bool":
            df[column] = df[column].fillna(False).astype(bool)
        elif dtype == "int64":
            df[column] = df[column].fillna(0).astype("int64")
        else:
            df[column] = df[column].astype("float64")
    return df[list(COLUMNS[table])]


def _rows(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    return rows


def _counted_losses(findings):
    """Within a process, findings that estimate time in the same copies
    (one loss_group) count once: the largest; as the report's total."""
    for row in findings:
        row["counted_seconds_lost"] = row.get("estimated_seconds_lost") or 0.0
    best = {}
    for i, row in enumerate(findings):
        group = row.get("loss_group")
        if group is None:
            continue
        key = (row["process"], group)
        if key not in best or row["counted_seconds_lost"] > findings[best[key]]["counted_seconds_lost"]:
            best[key] = i
    keep = set(best.values())
    for i, row in enumerate(findings):
        if row.get("loss_group") is not None and i not in keep:
            row["counted_seconds_lost"] = 0.0


def _host_seconds(series, hosts):
    """Per host and bucket, the batch's processes' pinned bytes summed (each
    process's largest in that bucket)."""
    peak = {}
    for row in series:
        if row.get("unix_ns") is None:
            continue
        key = (row["process"], int(row["unix_ns"] // (HOST_BUCKET_SECONDS * 1000000000)))
        peak[key] = max(peak.get(key, 0), int(row["pinned_bytes"]))
    summed = {}
    for (process, second), value in peak.items():
        key = (hosts.get(process, ""), second)
        summed[key] = summed.get(key, 0) + value
    return [{"host": h, "bucket": s, "pinned_bytes": v} for (h, s), v in summed.items()]


def _read_export(directory):
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    if manifest.get("schema") != "pinshim-export" or manifest.get("version") != EXPORT_SCHEMA_VERSION:
        raise ValueError("pinshim export wrote schema %r version %r; this fleet reads version %d"
                         % (manifest.get("schema"), manifest.get("version"), EXPORT_SCHEMA_VERSION))
    raw = {t: _rows(os.path.join(directory, t + ".jsonl"))
           for t in ("processes", "sites", "copies", "pinned_sites", "findings", "pinned_series",
                     "problems")}
    hosts = {p["process"]: p["host"] for p in raw["processes"]}
    programs = {p["process"]: p["program"] for p in raw["processes"]}
    for row in raw["copies"] + raw["findings"]:
        row["host"] = hosts.get(row["process"], "")
        row["program"] = programs.get(row["process"], "")
    _counted_losses(raw["findings"])
    raw["host_seconds"] = _host_seconds(raw["pinned_series"], hosts)
    return {t: _frame(t, raw[t]) for t in TABLES}


# Partial fleet tables: name -> (key columns, {column: how it combines}).
# "distinct" tables keep their distinct key rows.
PARTIALS = {
    "totals": (["all"], {"processes": "sum", "copies": "sum", "failed_copies": "sum",
                         "copy_bytes": "sum", "findings": "sum",
                         "estimated_seconds_lost": "sum", "incomplete": "sum"}),
    "site_rules": (["site_id", "rule"], {"findings": "sum", "loss": "sum", "processes": "sum"}),
    "site_processes": (["site_id"], {"processes": "sum", "site_short": "first"}),
    "site_hosts": (["site_id", "host"], "distinct"),
    "site_programs": (["site_id", "program"], "distinct"),
    "site_copies": (["site"], {"copies": "sum", "bytes": "sum", "call_seconds": "sum"}),
    "rules": (["rule", "severity"], {"findings": "sum", "loss": "sum"}),
    "rule_processes": (["rule"], {"processes": "sum"}),
    "programs": (["program", "rule"], {"findings": "sum", "loss": "sum"}),
    "host_buckets": (["host", "bucket"], {"pinned_bytes": "sum"}),
    "hosts": (["host"], {"processes": "sum", "largest_process_peak_bytes": "max",
                         "node_budget_bytes": "max", "budget_bytes": "max"}),
    "bandwidth": (["direction", "memory"], {"copies": "sum", "failed": "sum",
                                            "async_copies": "sum", "bytes": "sum",
                                            "call_seconds": "sum"}),
    "sites": (["site"], "definition"),
    "problems": (["trace", "problem"], "distinct"),
}


def _group(df, keys, how):
    if how == "distinct":
        return df[keys].drop_duplicates().reset_index(drop=True)
    if how == "definition":
        # One definition per site: a symbolized one where there is one.
        named = df.assign(_named=df["file"].notna())
        named = named.sort_values(keys + ["_named"], ascending=[True] * len(keys) + [False])
        return named.drop_duplicates(keys).drop(columns="_named").reset_index(drop=True)
    return df.groupby(keys, as_index=False, sort=False, dropna=False).agg(how)


def partial(t):
    """The batch's tables (read by _read_export) as partial fleet tables."""
    f = t["findings"].assign(site_id=t["findings"]["site"].fillna("?" + t["findings"]["site_short"]),
                             loss=t["findings"]["counted_seconds_lost"], findings=1)
    p = t["processes"]
    one_per_process = f.drop_duplicates(["site_id", "process"])
    raw = {
        "totals": pd.DataFrame([{"all": 0, "processes": len(p), "copies": p["copies"].sum(),
                                 "failed_copies": p["failed_copies"].sum(),
                                 "copy_bytes": p["copy_bytes"].sum(),
                                 "findings": p["findings"].sum(),
                                 "estimated_seconds_lost": p["estimated_seconds_lost"].sum(),
                                 "incomplete": int((~p["trace_complete"]).sum())}]),
        "site_rules": f.drop_duplicates(["site_id", "rule", "process"]).assign(processes=1)[
            ["site_id", "rule", "processes"]].merge(
                f.groupby(["site_id", "rule"], as_index=False).agg(
                    {"findings": "sum", "loss": "sum"}), on=["site_id", "rule"]),
        "site_processes": one_per_process.assign(processes=1)[["site_id", "processes",
                                                               "site_short"]],
        "site_hosts": f, "site_programs": f,
        "site_copies": t["copies"].assign(site=t["copies"]["site"].fillna("?")),
        "rules": f,
        "rule_processes": f.drop_duplicates(["rule", "process"]).assign(processes=1),
        "programs": f,
        "host_buckets": t["host_seconds"],
        "hosts": p.assign(processes=1, largest_process_peak_bytes=p["peak_pinned_bytes"]),
        "bandwidth": t["copies"],
        "sites": t["sites"],
        "problems": t["problems"],
    }
    return {name: _group(raw[name], keys, how) for name, (keys, how) in PARTIALS.items()}


def combine(parts):
    """Partials of any batches merged into one partial ("traces" summed)."""
    out = {}
    for name, (keys, how) in PARTIALS.items():
        frames = [p[name] for p in parts if len(p[name])]
        out[name] = _group(pd.concat(frames, ignore_index=True), keys, how) if frames else \
            parts[0][name].iloc[0:0]
    out["traces"] = sum(p["traces"] for p in parts)
    return out


def _failed(traces, why):
    out = {t: empty(t) for t in TABLES}
    out["problems"] = _frame("problems", [{"trace": t, "problem": "%s: %s" % (t, why)}
                                          for t in traces])
    return partial(out)


def export_batch(traces, pinshim, calibration=None):
    """The partial fleet tables of `traces` (paths readable on this worker),
    with "traces": how many were given. An export that fails as a whole (it
    crashed) is retried trace by trace, so one bad trace costs only itself."""
    tmp = tempfile.mkdtemp(prefix="pinshim-fleet-")
    try:
        command = [pinshim, "export", "--quiet", "--out", tmp]
        if calibration:
            command += ["--calibration", calibration]
        proc = subprocess.run(command + ["--"] + list(traces), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True)
        if os.path.exists(os.path.join(tmp, "manifest.json")):
            out = partial(_read_export(tmp))
        elif len(traces) > 1:
            out = combine([export_batch([t], pinshim, calibration) for t in traces])
        else:
            tail = proc.stderr.strip().splitlines()[-1:] or ["no message"]
            out = _failed(traces, "pinshim export exited with status %d: %s"
                          % (proc.returncode, tail[0]))
    except OSError as e:
        out = _failed(traces, "cannot run %s: %s" % (pinshim, e.strerror))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["traces"] = len(traces)
    return out


# The memory of a worker (client.run), in this module so that the workers of
# an existing cluster receive them with the tasks.
def rss_now():
    """This process's resident set now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_peak():
    """This process's largest resident set so far, in bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
