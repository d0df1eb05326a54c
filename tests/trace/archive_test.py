"""pinshim archive: a trace directory made self-contained reports the same
after the program it traced is gone. The program is copied to a folder of
its own, traced, reported, archived, deleted and reported again; the text
and JSON reports must be byte for byte the same, and without the archive
they must not be (the check can fail). The archive's size is printed."""
import json
import os
import shutil
import subprocess
import sys
import unittest

TMP = os.environ.get("TEST_TMPDIR", "/tmp")
PINSHIM = "analyzer/pinshim"
PRELOAD = os.path.abspath("shim/libpinshim.so")
FAKECUDA = os.path.abspath("tests/fakecuda")
PROGRAMS = ["copy_race_driver", "pageable_hot_driver", "wc_read_driver"]


def pinshim(*args):
    return subprocess.run([PINSHIM] + list(args), capture_output=True, text=True, timeout=300)


class ArchiveTest(unittest.TestCase):
    def setUp(self):
        self.root = os.path.join(TMP, "archive")
        shutil.rmtree(self.root, ignore_errors=True)
        self.bin = os.path.join(self.root, "bin")
        self.traces = os.path.join(self.root, "traces")
        os.makedirs(self.bin)
        os.makedirs(self.traces)
        # The simulated driver where there is one (CI); elsewhere the system's.
        path = os.environ.get("LD_LIBRARY_PATH", "")
        env = dict(os.environ, LD_PRELOAD=PRELOAD, PINSHIM_TRACE_DIR=self.traces,
                   LD_LIBRARY_PATH=FAKECUDA + (":" + path if path else ""))
        for name in PROGRAMS:
            copy = os.path.join(self.bin, name)
            shutil.copy(os.path.join("tests/trace/programs", name), copy)
            proc = subprocess.run([copy], env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr)

    def reports(self):
        text = pinshim("report", self.traces)
        data = pinshim("report", "--format", "json", self.traces)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertEqual(data.returncode, 0, data.stderr)
        return text.stdout, data.stdout

    def test_report_after_the_binaries_are_gone(self):
        before = self.reports()
        self.assertIn("copy_race.cc:23", before[0])
        out = pinshim("archive", self.traces)
        self.assertEqual(out.returncode, 0, out.stderr)
        archive = os.path.join(self.traces, "pinshim-symbols.txt")
        size = os.path.getsize(archive)
        print("archive of %d traces: %d bytes; %s" % (len(PROGRAMS), size, out.stdout.strip()))
        self.assertIn("3 traces", out.stdout)
        self.assertEqual(self.reports(), before)  # archiving changes nothing here
        shutil.rmtree(self.bin)
        after = self.reports()
        self.assertEqual(after[0], before[0])
        self.assertEqual(after[1], before[1])
        # Archiving again where the binaries are gone keeps what was archived.
        self.assertEqual(pinshim("archive", self.traces).returncode, 0)
        self.assertEqual(self.reports(), before)
        # Without the archive the same traces lose their program's symbols.
        os.rename(archive, archive + ".away")
        bare = self.reports()
        self.assertNotEqual(bare[0], before[0])
        self.assertNotIn("copy_race.cc:23", bare[0])
        self.assertIn("file not found", bare[0])
        json.loads(bare[1])

    def test_bad_input(self):
        self.assertEqual(pinshim("archive").returncode, 2)
        self.assertEqual(pinshim("archive", os.path.join(self.root, "missing")).returncode, 2)
        empty = os.path.join(self.root, "empty")
        os.makedirs(empty)
        out = pinshim("archive", empty)
        self.assertEqual(out.returncode, 2)
        self.assertIn("no pinshim traces", out.stderr)
        # A damaged archive is named; the report still works from the files.
        with open(os.path.join(self.traces, "pinshim-symbols.txt"), "w") as f:
            f.write("something else\n")
        text = pinshim("report", self.traces)
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("not a pinshim symbol archive", text.stderr)
        self.assertIn("copy_race.cc:23", text.stdout)
        self.assertEqual(pinshim("archive", self.traces).returncode, 2)  # not replaced


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
