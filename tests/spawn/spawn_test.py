"""Children started with vfork, posix_spawn or clone share (or copy) the
parent's memory without fork's handlers. The parent's trace must survive
them: one trace file, the parent's, complete, with every copy in it, and a
summary that counts every copy (a vfork child's _exit must not leave the
parent's thread uncounted). Before the fix a CuPy-like Python program left
no trace at all."""
import json
import os
import shutil
import subprocess
import sys
import unittest

TMP = os.environ.get("TEST_TMPDIR", "/tmp")
PRELOAD = os.path.abspath("shim/libpinshim.so")
REPORT = "analyzer/report/pinshim-report"
FAKECUDA = os.path.abspath("tests/fakecuda")


def run(name, cmd):
    d = os.path.join(TMP, "spawn", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    summary = os.path.join(d, "summary.%p.txt")
    env = dict(os.environ, LD_PRELOAD=PRELOAD, PINSHIM_TRACE_DIR=d,
               PINSHIM_SUMMARY=summary, LD_LIBRARY_PATH=FAKECUDA)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    return d, proc


def traces(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".pstrace"))


class SpawnTest(unittest.TestCase):
    def check(self, name, cmd, copies):
        d, proc = run(name, cmd)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("copies %d" % copies, proc.stdout)
        files = traces(d)
        self.assertEqual(len(files), 1, "%s: traces %s" % (name, files))
        out = subprocess.run([REPORT, "--format", "json", d], capture_output=True, text=True,
                             timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        data = json.loads(out.stdout)
        self.assertEqual(len(data["processes"]), 1)
        p = data["processes"][0]
        self.assertTrue(p["trace_complete"], p)
        self.assertEqual(p["copies"], copies)
        # The summary of the traced process counts every copy.
        sums = [f for f in os.listdir(d) if f.startswith("summary.")]
        totals = []
        for f in sums:
            with open(os.path.join(d, f)) as fh:
                for line in fh:
                    if line.startswith("pinshim: totals"):
                        totals.append(int(line.split("copies=")[1].split()[0]))
        self.assertIn(copies, totals, "summaries: %s" % totals)
        return data

    def test_vfork_posix_spawn_and_clone(self):
        self.check("native", ["tests/spawn/spawn_children"], 7)

    def test_python_subprocess_before_and_after_cuda(self):
        self.check("python", [sys.executable, "tests/spawn/spawn_ctypes.py"], 5)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
