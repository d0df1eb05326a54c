"""`pinshim fleet`'s command line, the Dask cluster it uses, progress, and
its outputs."""
import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time

USAGE = """usage: pinshim fleet --out DIR [--scheduler ADDRESS | --workers N] [--batch N]
                     [--calibration FILE] [--pinshim PATH] TRACE_ROOT...

Finds every pinshim trace (*.pstrace) under the TRACE_ROOTs, analyzes them
with pinshim export as tasks of a Dask cluster (one task per batch of
traces of one directory), and reduces the tables on the cluster to fleet
tables and one self-contained HTML page in DIR: the top call sites by
estimated time lost (with how many programs, processes and hosts show
them), findings by rule and by program, pinned memory per host against its
node budget, and copy bandwidth by memory kind. A trace that cannot be read
is listed with its reason. Progress goes to stderr. Needs dask, distributed
and pandas in the Python that runs it (PINSHIM_PYTHON; docs/fleet.md).

  --out DIR            where the fleet tables and fleet.html go (created)
  --workers N          start a local Dask cluster of N worker processes
                       (default: one per core)
  --scheduler ADDRESS  use an existing Dask cluster (tcp://host:8786); its
                       workers must read the traces at the same paths and run
                       pinshim export (--pinshim)
  --batch N            traces per task (default 32)
  --calibration FILE   copy bandwidths for the estimates (pinshim calibrate)
  --pinshim PATH       the pinshim the workers run (default: this one)
"""

PACKAGES = "dask, distributed and pandas"
DEBIAN = "python3-dask python3-distributed python3-pandas"


def say(line):
    sys.stderr.write("pinshim fleet: %s\n" % line)
    sys.stderr.flush()


class Usage(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Usage(message)


def parse(argv):
    p = Parser(prog="pinshim fleet", add_help=False, usage=USAGE)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("--out")
    p.add_argument("--workers", type=int)
    p.add_argument("--scheduler")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--calibration")
    p.add_argument("--pinshim", default=os.environ.get("PINSHIM_FLEET_PINSHIM", "pinshim"))
    p.add_argument("roots", nargs="*")
    args = p.parse_args(argv)
    if args.help:
        return args
    if not args.out:
        raise Usage("--out DIR is required")
    if not args.roots:
        raise Usage("no TRACE_ROOT given")
    if args.scheduler is not None and not args.scheduler:
        raise Usage("--scheduler needs an address (tcp://host:8786)")
    if args.workers is not None and args.scheduler:
        raise Usage("--workers and --scheduler exclude each other")
    if args.workers is not None and args.workers < 1:
        raise Usage("--workers needs a number of at least 1")
    if args.batch < 1:
        raise Usage("--batch needs a number of at least 1")
    return args


def missing_packages():
    """None, or a line naming what this interpreter lacks and how to get it."""
    lacking = []
    for name in ("dask", "distributed", "pandas"):
        try:
            __import__(name)
        except ImportError:
            lacking.append(name)
    if not lacking:
        return None
    return ("%s is missing %s: it needs %s (Debian: apt install %s; or pip install dask "
            "distributed pandas), or set PINSHIM_PYTHON to a Python that has them"
            % (sys.executable, ", ".join(lacking), PACKAGES, DEBIAN))


def write_file(directory, name, text):
    """Writes under a new temporary name beside it (O_EXCL, O_NOFOLLOW) and
    renames it into place: nothing planted at either name is written to."""
    fd, tmp = tempfile.mkstemp(prefix="." + name + ".", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def prepare_out(directory):
    if os.path.islink(directory):
        raise Usage("--out %s is a symbolic link, which is not followed" % directory)
    os.makedirs(directory, exist_ok=True)
    if not os.path.isdir(directory):
        raise Usage("--out %s is not a directory" % directory)


def start_client(args, scratch):
    from distributed import Client, LocalCluster
    if args.scheduler:
        return Client(args.scheduler), None
    workers = args.workers or os.cpu_count() or 1
    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                           dashboard_address=None, local_directory=scratch,
                           silence_logs=logging.ERROR)
    return Client(cluster), cluster


def run_map(client, batches, args):
    """Submits one task per batch; reports progress as they finish."""
    from distributed import as_completed
    from pinshim_fleet import tasks
    total = sum(len(b) for b in batches)
    futures = client.map(tasks.export_batch, batches, pinshim=args.pinshim,
                         calibration=args.calibration, pure=False)
    sizes = {f.key: len(b) for f, b in zip(futures, batches)}
    done, last = 0, 0.0
    for future in as_completed(futures):
        done += sizes[future.key]
        now = time.monotonic()
        if now - last >= 2 or done == total:
            say("%d/%d traces analyzed" % (done, total))
            last = now
    return futures


def write_outputs(out, result, stats):
    from pinshim_fleet import page, reduce
    tables = {"top_sites": result["top_sites"], "findings_by_rule": result["findings_by_rule"],
              "findings_by_program": result["findings_by_program"],
              "host_pinned": result["host_pinned"], "bandwidth": result["bandwidth"],
              "problems": result["problems"]}
    for name, df in tables.items():
        lines = [json.dumps(r, sort_keys=True) for r in reduce.as_records(df)]
        write_file(out, name + ".jsonl", "".join(l + "\n" for l in lines))
    summary = {"schema": "pinshim-fleet", "version": 1, "totals": result["totals"],
               "run": stats}
    write_file(out, "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    write_file(out, "fleet.html", page.render(result, stats))


def analyze(args):
    from pinshim_fleet import discover, reduce, tasks
    started = time.monotonic()
    problems = []
    traces = discover.find_traces(args.roots, problems)
    for p in problems:
        say(p["problem"])
    batches = discover.batches(traces, args.batch)
    say("%d traces in %d tasks" % (len(traces), len(batches)))
    scratch = tempfile.mkdtemp(prefix="pinshim-fleet-dask-")
    try:
        client, cluster = start_client(args, scratch)
        try:
            import cloudpickle
            # The workers of an existing cluster need not have this package.
            cloudpickle.register_pickle_by_value(tasks)
        except (ImportError, AttributeError):
            pass
        try:
            workers = len(client.scheduler_info()["workers"])
            mapped_at = time.monotonic()
            futures = run_map(client, batches, args) if batches else []
            map_s = time.monotonic() - mapped_at
            rss_after_map = client.run(tasks.rss_now)
            reduce_at = time.monotonic()
            result = (reduce.finish(reduce.combine_on_cluster(client, futures).result())
                      if futures else None)
            reduce_s = time.monotonic() - reduce_at
            rss_peak = client.run(tasks.rss_peak)
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if result is None:
        raise Usage("no trace found under %s" % " ".join(args.roots))
    if problems:
        extra = reduce.pd.DataFrame(problems, columns=["trace", "problem"])
        result["problems"] = reduce.pd.concat([result["problems"], extra], ignore_index=True)
        result["totals"]["unreadable_traces"] = int(len(result["problems"]))
    stats = {"traces": len(traces), "tasks": len(batches), "workers": workers,
             "hosts": int(len(result["host_pinned"])),
             "seconds_total": time.monotonic() - started, "seconds_map": map_s,
             "seconds_reduce": reduce_s,
             "traces_per_second": len(traces) / map_s if map_s > 0 else None,
             "worker_rss_after_map_bytes": max(rss_after_map.values(), default=0),
             "worker_peak_rss_bytes": max(rss_peak.values(), default=0),
             "client_peak_rss_bytes": tasks.rss_peak()}
    return result, stats


def main(argv):
    try:
        args = parse(argv)
        if args.help:
            sys.stdout.write(USAGE)
            return 0
        lacking = missing_packages()
        if lacking:
            say(lacking)
            return 2
        prepare_out(args.out)
        result, stats = analyze(args)
        write_outputs(args.out, result, stats)
    except Usage as e:
        say("%s; see pinshim fleet --help" % e)
        return 2
    t = result["totals"]
    say("%d processes, %d copies, %d findings, %.3f s estimated lost, %d unreadable traces; "
        "%s/fleet.html" % (t["processes"], t["copies"], t["findings"],
                           t["estimated_seconds_lost"], t["unreadable_traces"], args.out))
    return 0
