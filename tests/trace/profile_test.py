"""Profiles of hot allocation sites, end to end: programs/hot_alloc_sites.cc
runs on the simulated driver under libpinshim.so with a trace; it copies one
malloc'ed buffer 40 times, another once and a third never. `pinshim report
--profile-out` must write exactly the first buffer's allocation site, named
by the program's GNU build id and the offsets of the stack's return
addresses, whether the trace came from observe or optimize mode; and
`pinshim run --profile` must accept the file (it reads it with the
library's own parser)."""

import json
import os
import re
import shutil
import struct
import subprocess
import unittest

HERE = "tests/trace"
PINSHIM = "analyzer/pinshim"
LIBRARY = "shim/libpinshim.so"
SOURCE = os.path.join(HERE, "programs", "hot_alloc_sites.cc")
PROGRAM = os.path.join(HERE, "programs", "hot_alloc_sites_driver")
NO_BUILD_ID = os.path.join(HERE, "programs", "hot_alloc_sites_no_build_id_driver")
TMP = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "profile_test")
HEADER = "# pinshim profile v1"
FRAME = re.compile(r"^([0-9a-f]+)\+0x([0-9a-f]+)$")
UNWRITABLE = ("more could not be written (a frame in a module without a GNU build id, "
              "or in no module the trace lists)")


def build_id(path):
    """The GNU build id of an ELF64 file, from its PT_NOTE program headers."""
    with open(path, "rb") as f:
        elf = f.read()
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz, _, p_align = struct.unpack_from(
            "<IIQQQQQQ", elf, phoff + i * phentsize)
        if p_type != 4:  # PT_NOTE
            continue
        align = 8 if p_align == 8 else 4
        pos = p_offset
        while pos + 12 <= p_offset + p_filesz:
            namesz, descsz, kind = struct.unpack_from("<III", elf, pos)
            name = pos + 12
            desc = name + (namesz + align - 1) // align * align
            if kind == 3 and elf[name:name + namesz] == b"GNU\0":  # NT_GNU_BUILD_ID
                return elf[desc:desc + descsz].hex()
            pos = desc + (descsz + align - 1) // align * align
    return ""


def source_of(binary, offset):
    """(function, "file:line") of the call a return address at `offset` returns to."""
    out = subprocess.run(["addr2line", "-f", "-C", "-e", binary, "0x%x" % (offset - 1)],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    return out[0], out[1].split(" ")[0]


def marker_lines(kind):
    with open(SOURCE) as f:
        return [n for n, text in enumerate(f, 1) if "// " + kind in text]


def fresh(name):
    path = os.path.join(TMP, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def run_program(binary, name, env=None):
    trace_dir = fresh(name)
    e = dict(os.environ, PINSHIM_TRACE_DIR=trace_dir, LD_PRELOAD=os.path.abspath(LIBRARY))
    e.update(env or {})
    proc = subprocess.run([binary], env=e, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError("%s exited %d: %s" % (binary, proc.returncode, proc.stderr))
    return trace_dir


def pinshim(args, env=None):
    e = dict(os.environ, PINSHIM_LIBRARY=os.path.abspath(LIBRARY), PINSHIM_CONFIG="")
    e.pop("LD_PRELOAD", None)
    e.update(env or {})
    return subprocess.run([PINSHIM] + args, env=e, capture_output=True, text=True, timeout=300)


def sites(text):
    """The frames of each site line, as [(build id, offset), ...]."""
    out = []
    for line in text.split("\n"):
        if line.startswith("site "):
            frames = []
            for word in line.split()[1:]:
                m = FRAME.match(word)
                if not m:
                    raise AssertionError("bad frame %r in %r" % (word, line))
                frames.append((m.group(1), int(m.group(2), 16)))
            out.append(frames)
    return out


class ProfileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.observe = run_program(PROGRAM, "observe")
        cls.optimize = run_program(PROGRAM, "optimize", {"PINSHIM_MODE": "optimize"})
        cls.no_build_id = run_program(NO_BUILD_ID, "no_build_id")
        cls.program_id = build_id(PROGRAM)

    def write_profile(self, traces, name, extra=()):
        path = os.path.join(TMP, name)
        out = pinshim(["report"] + list(extra) + ["--profile-out", path] + traces)
        self.assertEqual(out.returncode, 0, out.stderr)
        with open(path) as f:
            text = f.read()
        self.assertFalse(os.path.exists(path + ".tmp"))
        return path, text, out

    def check_hot_site(self, text):
        """The profile holds exactly the staging buffer's allocation site."""
        lines = text.split("\n")
        self.assertEqual(lines[0], HEADER)
        for line in lines[1:]:
            self.assertTrue(line == "" or line.startswith("#") or line.startswith("site "), line)
        found = sites(text)
        self.assertEqual(len(found), 1, text)
        frames = found[0]
        self.assertEqual(len(frames), 4, text)
        self.assertTrue(self.program_id, "the test program has no build id")
        # Innermost first: the allocating function's call to the allocator
        # (the harness's malloc wrapper is a jump, not a frame), then main.
        self.assertEqual(frames[0][0], self.program_id)
        function, where = source_of(PROGRAM, frames[0][1])
        self.assertEqual(function, "AllocateStaging(unsigned long)")
        self.assertTrue(where.endswith("%s:%d" % (SOURCE, marker_lines("HOT_SITE")[0])), where)
        self.assertEqual(frames[1][0], self.program_id)
        self.assertEqual(source_of(PROGRAM, frames[1][1])[0], "main")
        # The comment just above names the function, its line, and the copies.
        comment = lines[lines.index("site " + " ".join(
            "%s+0x%x" % f for f in frames)) - 1]
        self.assertTrue(comment.startswith("# 1. AllocateStaging(unsigned long) ("), comment)
        self.assertIn("%s:%d)" % (SOURCE, marker_lines("HOT_SITE")[0]), comment)
        # Nothing of the buffers copied once or never.
        for name in ("AllocateScratch", "AllocateSpare"):
            self.assertNotIn(name, text)
        return frames, comment

    def accepted_by_run(self, path):
        """pinshim run --profile reads the file, then runs the program with it."""
        trace_dir = fresh("run_" + os.path.basename(path))
        out = pinshim(["run", "--mode", "optimize", "--profile", path, "--trace-dir", trace_dir,
                       "--", PROGRAM])
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stderr, "")

    def test_observe_mode_trace(self):
        path, text, out = self.write_profile([self.observe], "observe.profile")
        _, comment = self.check_hot_site(text)
        self.assertIn(": 1 buffer copied 40 times, 160.0 MiB in all; ", comment)
        self.assertEqual(out.stderr, "pinshim: profile: 1 hot site written to %s\n" % path)
        # The text report is printed as usual.
        self.assertIn("pageable-hot", out.stdout)
        self.accepted_by_run(path)

    def copies_by_kind(self, path, env):
        """Runs the program under the library with a summary; returns the H2D
        copy calls by source kind, and the optimize line's fields."""
        summary = os.path.join(TMP, os.path.basename(path) + ".summary")
        e = dict(os.environ, LD_PRELOAD=os.path.abspath(LIBRARY), PINSHIM_SUMMARY=summary,
                 PINSHIM_MODE="optimize")
        e.update(env)
        proc = subprocess.run([PROGRAM], env=e, capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(summary) as f:
            text = f.read()
        kinds, fields = {}, {}
        for line in text.split("\n"):
            words = dict(w.split("=", 1) for w in line.split()[2:] if "=" in w)
            if line.startswith("pinshim: copy ") and words.get("dir") == "H2D":
                kinds[words["src"]] = kinds.get(words["src"], 0) + int(words["calls"])
            if line.startswith("pinshim: optimize "):
                fields = {k: int(v) for k, v in words.items()}
        self.assertTrue(fields, text)
        return kinds, fields, proc.stderr

    def test_profile_pins_the_site_from_its_first_allocation(self):
        path, _, _ = self.write_profile([self.observe], "first.profile")
        # Without a profile the staging buffer must earn its pinning: its
        # first copies run pageable.
        kinds, fields, _ = self.copies_by_kind(path + ".none", {})
        self.assertEqual(fields["profile_sites"], 0)
        self.assertGreater(kinds.get("pageable", 0), 1, kinds)
        # With it, the site is hot from the first allocation: all 40 copies
        # of the staging buffer run pinned; only the scratch buffer's single
        # copy stays pageable.
        kinds, fields, err = self.copies_by_kind(path, {"PINSHIM_PROFILE": path})
        self.assertEqual(err, "")
        self.assertEqual(fields["profile_sites"], 1, fields)
        self.assertEqual(kinds.get("pinshim", 0), 40, kinds)
        self.assertEqual(kinds.get("pageable", 0), 1, kinds)

    def test_unusable_profile_is_reported_and_ignored(self):
        bad = os.path.join(TMP, "bad.profile")
        with open(bad, "w") as f:
            f.write("not a profile\n")
        kinds, fields, err = self.copies_by_kind(bad, {"PINSHIM_PROFILE": bad})
        self.assertIn("profile not used: %s" % bad, err)
        self.assertEqual(fields["profile_sites"], 0)

    def test_optimize_mode_trace_gives_the_same_site(self):
        _, observed, _ = self.write_profile([self.observe], "observe2.profile")
        path, text, out = self.write_profile([self.optimize], "optimize.profile",
                                             ["--format", "json"])
        report = json.loads(out.stdout)
        moved = report["processes"][0]["bytes_moved"]["H2D"]
        self.assertGreater(moved.get("pinshim", 0), 0, "optimize mode pinned nothing")
        self.check_hot_site(text)
        self.assertEqual(sites(text), sites(observed))
        self.accepted_by_run(path)

    def test_several_traces(self):
        path, text, out = self.write_profile([self.observe, self.optimize], "both.profile",
                                             ["--format", "json"])
        json.loads(out.stdout)
        self.assertIn("from 2 traces", text)
        _, comment = self.check_hot_site(text)
        self.assertIn(": 2 buffers copied 80 times, 320.0 MiB in all; ", comment)
        self.assertTrue(comment.endswith(", in 2 processes"), comment)
        self.assertEqual(out.stderr, "pinshim: profile: 1 hot site written to %s\n" % path)

    def test_sites_without_a_build_id_are_counted(self):
        path, text, out = self.write_profile([self.no_build_id], "none.profile")
        self.assertEqual(sites(text), [])
        self.assertTrue(text.startswith(HEADER + "\n"))
        self.assertEqual(out.stderr, "pinshim: profile: 0 hot sites written to %s; 1 %s\n" %
                         (path, UNWRITABLE))
        # With the other trace: its site is written, this one is counted.
        path, text, out = self.write_profile([self.observe, self.no_build_id], "mixed.profile")
        self.check_hot_site(text)
        self.assertEqual(out.stderr, "pinshim: profile: 1 hot site written to %s; 1 %s\n" %
                         (path, UNWRITABLE))
        self.accepted_by_run(path)

    def test_the_same_traces_give_the_same_file(self):
        _, first, _ = self.write_profile([self.observe, self.optimize], "again1.profile")
        _, second, _ = self.write_profile([self.optimize, self.observe], "again2.profile")
        self.assertEqual(first, second)

    def test_a_profile_that_cannot_be_written_is_an_error(self):
        missing = os.path.join(TMP, "no", "such", "dir", "p.profile")
        out = pinshim(["report", "--profile-out", missing, self.observe])
        self.assertEqual(out.returncode, 2)
        self.assertEqual(out.stderr.strip().split("\n")[-1],
                         "pinshim report: cannot write the profile %s: "
                         "No such file or directory" % missing)
        # A directory in the way: refused before anything is written, and no
        # temporary file is left beside it.
        blocked = fresh("blocked")
        out = pinshim(["report", "--profile-out=" + blocked, self.observe])
        self.assertEqual(out.returncode, 2)
        self.assertIn("pinshim report: --profile-out %s: exists and is not a regular file" %
                      blocked, out.stderr)
        parent, name = os.path.split(blocked)
        self.assertEqual([f for f in os.listdir(parent) if f.startswith("." + name)], [])

    def test_usage(self):
        for args in (["--profile-out"], ["--profile-out=", self.observe]):
            out = pinshim(["report"] + args)
            self.assertEqual(out.returncode, 2)
            self.assertEqual(out.stderr, "pinshim report: --profile-out needs a file\n")
        out = pinshim(["report", "--help"])
        self.assertIn("--profile-out FILE", out.stdout)
        out = pinshim(["run", "--help"])
        self.assertNotIn("not used yet", out.stdout)


if __name__ == "__main__":
    unittest.main()
