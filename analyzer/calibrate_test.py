"""pinshim calibrate on the simulated driver: it measures, writes a file
marked as meaningless that pinshim report --calibration reads, and refuses
to run under pinshim or without a driver."""
import glob
import json
import os
import re
import subprocess
import tempfile
import unittest

RUNFILES = os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"])
PINSHIM = os.path.join(RUNFILES, "analyzer", "pinshim")
FAKECUDA = os.path.join(RUNFILES, "tests", "fakecuda")
EXAMPLE = os.path.join(RUNFILES, "tests", "programs", "copy_loop_example")
TMP = tempfile.mkdtemp(prefix="calibrate.", dir=os.environ.get("TEST_TMPDIR"))
LINE = re.compile(r"^(H2D|D2H) (pageable|pinned) (\d+[KMG]?) (\d+\.\d+)$")


def pinshim(args, driver=True, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PINSHIM_") and k != "LD_PRELOAD"}
    env["PINSHIM_CONFIG"] = ""
    env["LD_LIBRARY_PATH"] = FAKECUDA if driver else ""
    env.update(extra)
    return subprocess.run([PINSHIM] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=env)


class CalibrateTest(unittest.TestCase):
    def test_writes_a_file_the_report_reads(self):
        path = os.path.join(TMP, "sim.cal")
        out = pinshim(["calibrate", "--max-size", "64K", "--output", path])
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("simulated", out.stderr)
        self.assertIn("mean nothing", out.stderr)
        with open(path) as f:
            text = f.read()
        comments = [l for l in text.splitlines() if l.startswith("#")]
        self.assertTrue(any("simulated driver" in l for l in comments), text)
        points = [LINE.match(l) for l in text.splitlines() if not l.startswith("#")]
        self.assertTrue(all(points), text)
        # Both directions, both kinds, sizes 4K and 64K.
        self.assertEqual(sorted((m.group(1), m.group(2), m.group(3)) for m in points),
                         sorted((d, k, s) for d in ("H2D", "D2H")
                                for k in ("pageable", "pinned") for s in ("4K", "64K")))
        self.assertTrue(all(float(m.group(4)) > 0 for m in points))

        traces = os.path.join(TMP, "traces")
        run = pinshim(["run", "--trace-dir", traces, "--", EXAMPLE])
        self.assertEqual(run.returncode, 0, run.stderr)
        report = pinshim(["report", "--format", "json", "--calibration", path, traces])
        self.assertEqual(report.returncode, 0, report.stderr)
        self.assertEqual(json.loads(report.stdout)["bandwidth_model"], path)

    def test_stdout_without_output(self):
        out = pinshim(["calibrate", "--max-size", "4K"])
        self.assertEqual(out.returncode, 0, out.stderr)
        points = [l for l in out.stdout.splitlines() if not l.startswith("#")]
        self.assertEqual(len(points), 4, out.stdout)

    def test_refuses_under_pinshim(self):
        out = pinshim(["run", "--", PINSHIM, "calibrate", "--max-size", "4K"])
        self.assertEqual(out.returncode, 2)
        self.assertIn("not under pinshim run", out.stderr)

    def test_bad_arguments(self):
        for args, text in ((["--max-size", "1K"], "at least 4K"),
                           (["--device", "x"], "expected a device number"),
                           (["--frobnicate"], "unknown option"),
                           (["--output"], "needs a value")):
            out = pinshim(["calibrate"] + args)
            self.assertEqual(out.returncode, 2, args)
            self.assertEqual(len(out.stderr.splitlines()), 1, out.stderr)
            self.assertIn(text, out.stderr)

    def test_without_a_driver(self):
        ldconfig = subprocess.run(["/sbin/ldconfig", "-p"], stdout=subprocess.PIPE,
                                  universal_newlines=True).stdout
        if "libcuda.so.1 " in ldconfig:
            self.skipTest("this machine has a CUDA driver")
        out = pinshim(["calibrate"], driver=False)
        self.assertEqual(out.returncode, 2)
        self.assertIn("cannot load the CUDA driver", out.stderr)


if __name__ == "__main__":
    unittest.main()
