"""Another local user against pinshim run as root.

The test makes a scratch directory under /tmp (nothing else is touched):
  victim    a root file that must never change
  private/  root's own (0700)
  shared/   writable by root and by group 65534, not sticky (0770): a
            directory the attacker may write where the kernel's protections
            for sticky directories (protected_symlinks, protected_fifos) do
            not apply, so that only pinshim's own care is tested
The attacker is uid 65534 (nobody), reached with setpriv (util-linux). It
plants links, FIFOs and files in shared/, holds or forges the lock of a node
ledger it may write, and writes damage into it; root then runs pinshim, and
nothing may be followed, overwritten or hang (every command has a timeout,
and a timeout fails the case). Crafted traces (make_crafted_trace) check the
reader and the reports: linear resynchronisation, names with control bytes
and markup, a trace truncated while it is read, a module path that is a
FIFO or a device. Run as anyone but root, each case is reported skipped
with the reason.

Arguments: PINSHIM LIBPINSHIM CLIENT MAKE_CRAFTED_TRACE LEDGER_TOOL FAKECUDA_DIR
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import xml.etree.ElementTree as ET

PINSHIM, LIB, CLIENT, CRAFT, LEDGER_TOOL, FAKECUDA = (os.path.abspath(a) for a in sys.argv[1:7])
HERE = os.path.dirname(os.path.abspath(__file__))
NOBODY = 65534
TIMEOUT = 60  # seconds; far above what any case needs, so only a hang meets it


def skip_reason():
    if os.geteuid() != 0:
        return "needs root: it makes files as root and plants others as uid 65534 (CI runs as root)"
    if shutil.which("setpriv") is None:
        return "needs setpriv (util-linux) to act as uid 65534"
    return None


class Scratch:
    def __init__(self):
        self.top = tempfile.mkdtemp(prefix="pinshim-attack-", dir="/tmp")
        os.chmod(self.top, 0o755)
        self.victim = os.path.join(self.top, "victim")
        with open(self.victim, "w") as f:
            f.write("precious\n")
        self.private = os.path.join(self.top, "private")
        os.mkdir(self.private, 0o700)
        self.shared = os.path.join(self.top, "shared")
        os.mkdir(self.shared)
        os.chown(self.shared, 0, NOBODY)
        os.chmod(self.shared, 0o770)

    def victim_intact(self):
        with open(self.victim) as f:
            return f.read() == "precious\n"

    def remove(self):
        shutil.rmtree(self.top, ignore_errors=True)


def as_nobody(cmd, **kw):
    """Runs cmd as uid/gid 65534 with no other group."""
    return subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                           "--clear-groups", "--"] + cmd, timeout=TIMEOUT, **kw)


def nobody_python(code):
    """Runs Python code as uid 65534; returns (exit status, output)."""
    p = as_nobody([sys.executable, "-c", code], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def pinshim(args, env=None):
    e = dict(os.environ, PINSHIM_CONFIG="")
    e.update(env or {})
    return subprocess.run([PINSHIM] + args, capture_output=True, text=True, timeout=TIMEOUT,
                          env=e)


def client(env, scenario="budget"):
    """The interception client under libpinshim.so on the simulated driver."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("PINSHIM_")}
    e.update(LD_LIBRARY_PATH=FAKECUDA, LD_PRELOAD=LIB, PINSHIM_CONFIG="")
    e.update(env)
    return subprocess.run([CLIENT, scenario], capture_output=True, text=True, timeout=TIMEOUT,
                          env=e)


def craft(*args):
    subprocess.run([CRAFT] + [str(a) for a in args], check=True, timeout=TIMEOUT)


def plant_link(scratch, name, target=None):
    """uid 65534 puts a link to the victim (or target) at shared/name."""
    path = os.path.join(scratch.shared, name)
    status, out = nobody_python("import os; os.symlink(%r, %r)" % (target or scratch.victim, path))
    assert status == 0, out
    return path


def plant_fifo(scratch, name):
    path = os.path.join(scratch.shared, name)
    status, out = nobody_python("import os; os.mkfifo(%r, 0o666)" % path)
    assert status == 0, out
    return path


def plant_for_next_pids(scratch, pattern, link=True, count=3000):
    """uid 65534 plants, for each pid the next processes are likely to get
    (pids are given out in order), a link to the victim, or a file of its
    own, at shared/(pattern % pid): where a writer that names its temporary
    file by its pid would write."""
    with open("/proc/sys/kernel/ns_last_pid") as f:
        first = int(f.read()) + 1
    code = ("import os\nfor pid in range(%d, %d):\n  p = os.path.join(%r, %r %% pid)\n"
            % (first, first + count, scratch.shared, pattern))
    code += ("  os.symlink(%r, p)\n" % scratch.victim if link else
             "  open(p, 'w').write('forged 1\\n')\n")
    status, out = nobody_python(code)
    assert status == 0, out


def a_trace(scratch, kind="names"):
    path = os.path.join(scratch.private, kind + ".pstrace")
    if not os.path.exists(path):
        craft(kind, path)
    return path


class AttackTest(unittest.TestCase):
    def setUp(self):
        reason = skip_reason()
        if reason:
            self.skipTest(reason)
        self.s = Scratch()

    def tearDown(self):
        if hasattr(self, "s"):
            self.s.remove()

    # --- Files pinshim writes: nothing is written through a planted link.

    def test_summary_is_not_written_through_a_link(self):
        path = plant_link(self.s, "summary.txt")
        r = client({"PINSHIM_SUMMARY": path})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(self.s.victim_intact())
        self.assertIn("cannot write summary to %s: is a symbolic link" % path, r.stderr)

    def test_profile_out_is_not_written_through_a_link(self):
        trace = a_trace(self.s)
        path = plant_link(self.s, "hot.profile")
        plant_link(self.s, "hot.profile.tmp")  # where the old writer's temporary file went
        r = pinshim(["report", "--profile-out", path, trace])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("is a symbolic link", r.stderr)
        self.assertTrue(self.s.victim_intact())

    def test_profile_out_refuses_the_trace_being_read(self):
        trace = a_trace(self.s)
        before = open(trace, "rb").read()
        r = pinshim(["report", "--profile-out", trace, trace])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("which is being read", r.stderr)
        self.assertEqual(open(trace, "rb").read(), before)

    def test_archive_is_not_written_through_a_link(self):
        shutil.copy(a_trace(self.s), os.path.join(self.s.shared, "app.1.pstrace"))
        # Links where a temporary file named by the pid would go.
        plant_for_next_pids(self.s, "pinshim-symbols.txt.tmp.%d")
        r = pinshim(["archive", self.s.shared])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(self.s.victim_intact())
        archive = os.path.join(self.s.shared, "pinshim-symbols.txt")
        self.assertFalse(os.path.islink(archive))
        # A link at the archive's own name.
        os.unlink(archive)
        plant_link(self.s, "pinshim-symbols.txt")
        r = pinshim(["archive", self.s.shared])
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertTrue(self.s.victim_intact())

    def test_metrics_file_is_not_written_through_a_link_nor_taken_from_another_user(self):
        path = plant_link(self.s, "m.prom")
        r = client({"PINSHIM_MODE": "enforce", "PINSHIM_BUDGET": "2M",
                    "PINSHIM_METRICS_FILE": path})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(self.s.victim_intact())
        self.assertIn("cannot write metrics file %s: is a symbolic link" % path, r.stderr)
        # A file of the attacker's at the name stays theirs and unchanged.
        owned = os.path.join(self.s.shared, "theirs.prom")
        status, out = nobody_python("open(%r, 'w').write('forged 1\\n')" % owned)
        self.assertEqual(status, 0, out)
        r = client({"PINSHIM_MODE": "enforce", "PINSHIM_BUDGET": "2M",
                    "PINSHIM_METRICS_FILE": owned})
        self.assertIn("belongs to another user", r.stderr)
        self.assertEqual(open(owned).read(), "forged 1\n")
        self.assertEqual(os.stat(owned).st_uid, NOBODY)
        # Files of the attacker's where the temporary file of the metrics
        # would be, were it named by the pid: the live file stays root's.
        live = os.path.join(self.s.shared, "live.prom")
        plant_for_next_pids(self.s, "live.prom.%d.tmp", link=False)
        r = client({"PINSHIM_MODE": "enforce", "PINSHIM_BUDGET": "2M",
                    "PINSHIM_METRICS_FILE": live})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.stat(live).st_uid, 0)
        self.assertIn("pinshim_denials_total", open(live).read())

    # --- Files pinshim reads: a FIFO or a device never blocks it.

    def test_fifo_trace_is_refused_at_once(self):
        fifo = plant_fifo(self.s, "x.pstrace")
        r = pinshim(["report", fifo])
        self.assertEqual(r.returncode, 2)
        self.assertIn("not a regular file", r.stderr)
        r = pinshim(["report", self.s.shared])  # the directory, FIFO inside
        self.assertEqual(r.returncode, 2)

    def test_fifo_config_profile_and_calibration_never_block(self):
        fifo = plant_fifo(self.s, "any")
        r = client({"PINSHIM_CONFIG": fifo, "PINSHIM_MODE": "enforce", "PINSHIM_BUDGET": "2M"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("not a regular file", r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        r = client({"PINSHIM_MODE": "optimize", "PINSHIM_PROFILE": fifo})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("profile not used", r.stderr)
        r = pinshim(["run", "--mode", "optimize", "--profile", fifo, "--", "true"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("not a regular file", r.stderr)
        for bad in (fifo, "/dev/zero"):
            r = pinshim(["report", "--calibration", bad, a_trace(self.s)])
            self.assertEqual(r.returncode, 2)
            self.assertIn("not a regular file", r.stderr)

    def test_module_path_that_is_a_fifo_or_a_device_is_skipped(self):
        fifo = plant_fifo(self.s, "libevil.so")
        for module in (fifo, "/dev/zero"):
            trace = os.path.join(self.s.private, "module.pstrace")
            craft("module", trace, module)
            r = pinshim(["report", "--format", "json", trace])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("not a regular file", r.stdout)

    # --- The node ledger.

    def ledger_env(self, path, shared=False, policy="deny"):
        env = {"PINSHIM_MODE": "enforce", "PINSHIM_NODE_BUDGET": "64M",
               "PINSHIM_LEDGER_PATH": path, "PINSHIM_POLICY": policy}
        if shared:
            env["PINSHIM_LEDGER_SHARED"] = "1"
        return env

    def test_planted_ledger_fails_closed_without_blocking(self):
        path = plant_fifo(self.s, "ledger")
        r = client(self.ledger_env(path))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("alloc 1M: 2\n", r.stdout)  # refused: the node cap holds
        self.assertIn("not a regular file", r.stderr)
        r = pinshim(["status", "--ledger", path])
        self.assertEqual(r.returncode, 2)
        # A world-writable "shared ledger" of the attacker's is refused too.
        other = os.path.join(self.s.shared, "sledger")
        status, out = nobody_python("import os; fd = os.open(%r, os.O_CREAT | os.O_RDWR, 0o666); "
                                    "os.fchmod(fd, 0o666); os.ftruncate(fd, 790528)" % other)
        self.assertEqual(status, 0, out)
        r = client(self.ledger_env(other, shared=True))
        self.assertIn("alloc 1M: 2\n", r.stdout)
        self.assertIn("lets every user write it", r.stderr)

    def test_another_user_cannot_open_root_ledgers(self):
        for shared in (False, True):
            path = os.path.join(self.s.shared, "ledger-%d" % shared)
            r = client(self.ledger_env(path, shared=shared))
            self.assertIn("alloc 1M: 0\n", r.stdout, r.stderr)
            status, out = nobody_python(
                "import os\ntry:\n  os.open(%r, os.O_RDWR)\nexcept PermissionError:\n"
                "  print('refused')\ntry:\n  os.truncate(%r, 0)\nexcept PermissionError:\n"
                "  print('refused')" % (path, path))
            self.assertEqual(out.count("refused"), 2, out)
            self.assertEqual(os.stat(path).st_mode & 0o777, 0o660 if shared else 0o600)

    def shared_ledger_of_group_nobody(self):
        """A shared ledger whose group (65534) takes part: the attacker may
        write it, within the limits production.md states."""
        path = os.path.join(self.s.shared, "group-ledger")
        r = client(self.ledger_env(path, shared=True))
        self.assertIn("alloc 1M: 0\n", r.stdout, r.stderr)
        os.chown(path, 0, NOBODY)
        return path

    def test_stopped_lock_holder_costs_a_bounded_wait(self):
        path = self.shared_ledger_of_group_nobody()
        holder = subprocess.Popen(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                                   "--clear-groups", "--", LEDGER_TOOL, "hold", path],
                                  stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline(), "locked\n")
            r = client(self.ledger_env(path, shared=True))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("held for over 2 s", r.stderr)
            self.assertIn("alloc 1M: 2\n", r.stdout)  # fails closed meanwhile
            r = pinshim(["status", "--shared", "--ledger", path])
            self.assertIn("held for over 2 s", r.stderr)
        finally:
            holder.kill()
            holder.wait()
        r = client(self.ledger_env(path, shared=True))
        self.assertIn("alloc 1M: 0\n", r.stdout, r.stderr)

    def test_lock_word_naming_a_vanished_thread_is_recovered(self):
        path = self.shared_ledger_of_group_nobody()
        gone = subprocess.Popen(["true"])
        gone.wait()
        r = as_nobody([LEDGER_TOOL, "forge-tid", path, str(gone.pid)], capture_output=True,
                      text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = client(self.ledger_env(path, shared=True))
        self.assertIn("alloc 1M: 0\n", r.stdout, r.stderr)
        r = pinshim(["status", "--shared", "--json", "--ledger", path])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["counters"]["lock_recoveries"], 1)

    def test_damaged_ledger_is_reported_with_names_escaped(self):
        path = self.shared_ledger_of_group_nobody()
        r = as_nobody([LEDGER_TOOL, "damage", path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = pinshim(["status", "--shared", "--ledger", path])
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("is damaged", r.stderr)
        self.assertNotIn("\x1b", r.stdout)
        self.assertNotIn("\nFAKE", r.stdout)

    # --- Crafted traces.

    def test_resynchronisation_is_linear(self):
        # A 32 MiB trace whose every other offset starts a 2 MiB frame that
        # fails its checksum: quadratic work would run for hours.
        trace = os.path.join(self.s.private, "resync.pstrace")
        craft("resync", trace, 32)
        r = pinshim(["report", trace])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("skipped", r.stdout)

    def test_names_cannot_forge_report_lines_or_markup(self):
        trace = a_trace(self.s)
        r = pinshim(["report", trace])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("\x1b", r.stdout)
        self.assertNotIn("\r", r.stdout)
        self.assertFalse([l for l in r.stdout.split("\n") if l.startswith("FAKE")], r.stdout)
        self.assertIn("\\x1b[2J", r.stdout)
        j = pinshim(["report", "--format", "json", trace])
        self.assertNotIn("\x1b", j.stdout)  # escaped as JSON escapes it, and kept
        self.assertIn("\x1b[2J", json.loads(j.stdout)["processes"][0]["program"])
        html = pinshim(["report", "--format", "html", trace]).stdout
        data = html.split('id="pinshim-report-json">', 1)[1].split("</script>", 1)[0]
        for c in "<>&":
            self.assertNotIn(c, data)
        self.assertIn("FAKE REPORT LINE \\u003c!--\\u003cscript\\u003e\\u0026", data)
        self.load_in_chromium(html)

    def load_in_chromium(self, html):
        sys.path.insert(0, os.path.join(os.getcwd(), "tests", "trace"))
        import headless_chromium
        binary = headless_chromium.find_chromium()
        if binary is None:
            self.fail("no chromium: scripts/install_deps.sh installs Debian's")
        page = os.path.join(self.s.private, "report.html")
        with open(page, "w") as f:
            f.write(html)
        b = headless_chromium.Chromium(binary, os.path.join(self.s.private, "chromium.log"))
        try:
            b.open("file://" + page)
            self.assertEqual(b.problems("file://" + page), [])
            self.assertEqual(b.evaluate("document.body.getAttribute('data-ready')"), "1")
            self.assertEqual(b.evaluate("document.scripts.length"), 2)
        finally:
            b.close()

    def test_trace_truncated_while_read_never_faults(self):
        trace = os.path.join(self.s.private, "moving.pstrace")
        craft("resync", trace, 8)
        whole = open(trace, "rb").read()
        stop = threading.Event()

        def churn():
            while not stop.is_set():
                with open(trace, "r+b") as f:
                    f.truncate(len(whole) // 7)
                with open(trace, "r+b") as f:
                    f.write(whole)

        t = threading.Thread(target=churn)
        t.start()
        try:
            for _ in range(30):
                r = subprocess.run([PINSHIM, "report", trace], capture_output=True,
                                   timeout=TIMEOUT)
                self.assertIn(r.returncode, (0, 2), r.stderr)  # never SIGBUS (-7)
        finally:
            stop.set()
            t.join()

    def test_full_disk_is_not_taken_for_a_running_process(self):
        traces = os.path.join(self.s.private, "traces")
        os.mkdir(traces)
        # Writes past 16 KiB fail as on a full disk (SIGXFSZ ignored, so that
        # the write returns an error instead of killing the process).
        script = ("import os, resource, signal, subprocess, sys; "
                  "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                  "resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384)); "
                  "env = dict(os.environ, LD_PRELOAD=sys.argv[1]); "
                  "sys.exit(subprocess.run(sys.argv[2:], env=env, restore_signals=False)"
                  ".returncode)")
        e = {k: v for k, v in os.environ.items() if not k.startswith("PINSHIM_")}
        e.pop("LD_PRELOAD", None)
        e.update(LD_LIBRARY_PATH=FAKECUDA, PINSHIM_CONFIG="", PINSHIM_TRACE_DIR=traces)
        r = subprocess.run([sys.executable, "-c", script, LIB, CLIENT, "random"], env=e,
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertIn("cannot write the trace", r.stderr)
        r = pinshim(["report", "--format", "json", traces])
        self.assertEqual(r.returncode, 0, r.stderr)
        damage = " ".join(p["damage"] for p in json.loads(r.stdout)["processes"])
        self.assertNotIn("still running", damage)
        self.assertIn("full disk", damage)


def write_xml(result, tests):
    path = os.environ.get("XML_OUTPUT_FILE")
    if not path:
        return
    failed = {t.id(): msg for t, msg in result.failures + result.errors}
    skipped = {t.id(): msg for t, msg in result.skipped}
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name="attack")
    for t in tests:
        case = ET.SubElement(suite, "testcase", name=t.id().split(".")[-1], classname="attack")
        if t.id() in failed:
            ET.SubElement(case, "failure", message=failed[t.id()][-1000:])
        elif t.id() in skipped:
            ET.SubElement(case, "skipped", message=skipped[t.id()])
    ET.ElementTree(suites).write(path)


def main():
    tests = list(unittest.defaultTestLoader.loadTestsFromTestCase(AttackTest))
    result = unittest.TextTestRunner(verbosity=2).run(unittest.TestSuite(tests))
    write_xml(result, tests)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
