"""End to end, for Python programs: programs/python_misuse.py reaches the
simulated driver (tests/fakecuda's libcuda.so.1) through ctypes under
libpinshim.so, and `pinshim report` must name each MISUSE(rule) line of the
.py file as that rule's site (ALLOC(rule) lines in its evidence), and the
native thread's copies (programs/native_copier.cc) at their C++ line,
labelled as a thread without a Python state. programs/python_subinterpreter.py
checks the subinterpreter label.

Every Python interpreter found on this machine runs the programs: the
system's python3 always; others where they are installed (python3.N in
/usr/bin and /usr/local/bin, and the colon-separated paths in
PINSHIM_TEST_PYTHONS, which scripts/test.sh fills with pyenv's versions:
the test itself looks into no home directory). 3.10 to 3.13 must give Python
sites; other versions must run unharmed with their stacks labelled
"unsupported_version". The interpreters exercised are printed."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

HERE = "tests/trace"
PROGRAM = os.path.abspath(os.path.join(HERE, "programs", "python_misuse.py"))
SUBINTERPRETER = os.path.abspath(os.path.join(HERE, "programs", "python_subinterpreter.py"))
STRESS = os.path.abspath(os.path.join(HERE, "programs", "python_stress.py"))
EMBED = os.path.abspath(os.path.join(HERE, "programs", "embed_python"))
COPIER = os.path.abspath(os.path.join(HERE, "programs", "native_copier.so"))
COPIER_SOURCE = os.path.join(HERE, "programs", "native_copier.cc")
REPORT = os.path.abspath("analyzer/report/pinshim-report")
PRELOAD = os.path.abspath("shim/libpinshim.so")
FAKECUDA = os.path.abspath("tests/fakecuda")
TMP = os.environ.get("TEST_TMPDIR", "/tmp")
SUPPORTED = [(3, 10), (3, 11), (3, 12), (3, 13)]


LINE_CHECK = os.path.abspath(os.path.join(HERE, "python_line_check"))

# Printed by each interpreter for python_line_check: every code object of a
# few standard modules, its line table, and the line the interpreter itself
# gives each instruction (co_lines()).
DUMP_LINES = r"""
import importlib, sys, types
def codes(co):
    yield co
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            for x in codes(c):
                yield x
out = []
for name in ("json.decoder", "threading", "collections", "argparse", "dis", "inspect",
             "ast", "logging", "typing", "unittest.case", "email.message", "asyncio.tasks"):
    path = importlib.import_module(name).__file__
    with open(path) as f:
        top = compile(f.read(), path, "exec")
    for c in codes(top):
        out.append("T %s %d" % (c.co_linetable.hex(), c.co_firstlineno))
        for start, end, line in c.co_lines():
            for offset in range(start, end, 2):
                out.append("%d %d" % (offset, line or 0))
sys.stdout.write("\n".join(out) + "\n")
"""


LAYOUT_DUMP = os.path.abspath(os.path.join(HERE, "python_layout_dump"))

# Compiled against an interpreter's own headers (internal ones included):
# the offsets of the fields pinshim reads, named as in PythonLayout.
LAYOUT_PROBE = r"""
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030b0000
#include "internal/pycore_frame.h"
#else
#include <frameobject.h>
#endif
#define F(name, value) printf("3.%d %s %d\n", PY_MINOR_VERSION, name, (int)(value))
int main(void) {
  F("ts_interp", offsetof(PyThreadState, interp));
  F("ts_thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX < 0x030b0000
  F("ts_frame", offsetof(PyThreadState, frame));
  F("cframe_current", -1);
  F("fr_previous", offsetof(PyFrameObject, f_back));
  F("fr_code", offsetof(PyFrameObject, f_code));
  F("fr_instr", offsetof(PyFrameObject, f_lasti));
  F("fr_owner", -1);
  F("fr_lineno", offsetof(PyFrameObject, f_lineno));
  F("owner_cstack", -1);
  F("co_name", offsetof(PyCodeObject, co_name));
  F("co_code_adaptive", -1);
  F("co_firsttraceable", -1);
#else
#if PY_VERSION_HEX < 0x030d0000
  F("ts_frame", offsetof(PyThreadState, cframe));
  F("cframe_current", offsetof(_PyCFrame, current_frame));
  F("fr_code", offsetof(_PyInterpreterFrame, f_code));
  F("fr_instr", offsetof(_PyInterpreterFrame, prev_instr));
#else
  F("ts_frame", offsetof(PyThreadState, current_frame));
  F("cframe_current", -1);
  F("fr_code", offsetof(_PyInterpreterFrame, f_executable));
  F("fr_instr", offsetof(_PyInterpreterFrame, instr_ptr));
#endif
  F("fr_previous", offsetof(_PyInterpreterFrame, previous));
  F("fr_owner", offsetof(_PyInterpreterFrame, owner));
  F("fr_lineno", -1);
#if PY_VERSION_HEX >= 0x030c0000
  F("owner_cstack", FRAME_OWNED_BY_CSTACK);
#else
  F("owner_cstack", -1);
#endif
  F("co_name", offsetof(PyCodeObject, co_qualname));
  F("co_code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
  F("co_firsttraceable", offsetof(PyCodeObject, _co_firsttraceable));
#endif
  F("owner_generator", 1);
  F("co_filename", offsetof(PyCodeObject, co_filename));
  F("co_firstlineno", offsetof(PyCodeObject, co_firstlineno));
  F("co_linetable", offsetof(PyCodeObject, co_linetable));
  F("ob_type", offsetof(PyObject, ob_type));
  F("ob_size", offsetof(PyVarObject, ob_size));
  F("bytes_data", offsetof(PyBytesObject, ob_sval));
  F("str_length", offsetof(PyASCIIObject, length));
  F("str_state", offsetof(PyASCIIObject, state));
  F("ascii_size", sizeof(PyASCIIObject));
  F("compact_size", sizeof(PyCompactUnicodeObject));
  return 0;
}
"""


def interpreters():
    """(path, (major, minor), version text) of each distinct interpreter."""
    candidates = [p for p in os.environ.get("PINSHIM_TEST_PYTHONS", "").split(":") if p]
    candidates += [shutil.which("python3") or "/usr/bin/python3", "/usr/bin/python3"]
    for pattern in ("/usr/bin/python3.[0-9]*", "/usr/local/bin/python3.[0-9]*"):
        candidates += sorted(glob.glob(pattern))
    found, seen = [], set()
    for c in candidates:
        if not c or not os.access(c, os.X_OK) or re.search(r"-config$|m$", c):
            continue
        real = os.path.realpath(c)
        if real in seen:
            continue
        seen.add(real)
        try:
            out = subprocess.run([c, "-c", "import sys; print('%d %d' % sys.version_info[:2]); "
                                  "print(sys.version.split()[0])"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode != 0:
            continue
        lines = out.stdout.split("\n")
        major, minor = (int(x) for x in lines[0].split())
        found.append((c, (major, minor), lines[1]))
    # One interpreter per version: the first found (the system's first).
    by_version = {}
    for entry in found:
        by_version.setdefault(entry[2], entry)
    return list(by_version.values())


def markers(source, kind):
    found = []
    with open(source) as f:
        for number, text in enumerate(f, 1):
            for rule in re.findall(kind + r"\(([a-z-]+)\)", text):
                found.append((rule, number))
    return found


def line_of(source, mark):
    with open(source) as f:
        for number, text in enumerate(f, 1):
            if mark in text:
                return number
    raise AssertionError("no %s in %s" % (mark, source))


def sites_in(value):
    if isinstance(value, dict):
        if "function" in value and "line" in value:
            yield value
        for v in value.values():
            yield from sites_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from sites_in(v)


def run(python, program, name, extra_env=None, args=()):
    trace_dir = os.path.join(TMP, "python-traces", name)
    shutil.rmtree(trace_dir, ignore_errors=True)
    # The simulated driver first; where it is not (the GPU machine), the real one.
    library_path = ":".join(p for p in (FAKECUDA, os.environ.get("LD_LIBRARY_PATH")) if p)
    env = dict(os.environ, PINSHIM_TRACE_DIR=trace_dir, LD_PRELOAD=PRELOAD,
               LD_LIBRARY_PATH=library_path, NATIVE_COPIER=COPIER)
    env.pop("PYTHONPATH", None)
    env.update(extra_env or {})
    proc = subprocess.run([python, program] + list(args), env=env, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        raise AssertionError("%s under %s exited %d: %s" % (program, python, proc.returncode,
                                                            proc.stderr[-2000:]))
    out = subprocess.run([REPORT, "--format", "json", trace_dir], capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise AssertionError("report failed: " + out.stderr)
    text = subprocess.run([REPORT, trace_dir], capture_output=True, text=True, timeout=300)
    if text.returncode != 0:
        raise AssertionError("text report failed: " + text.stderr)
    return proc.stdout, json.loads(out.stdout), text.stdout


def describe(findings):
    return ["%s at %s:%s (%s)" % (f["rule"], (f["site"] or {}).get("file"),
                                 (f["site"] or {}).get("line"),
                                 (f["site"] or {}).get("python_status")) for f in findings]


class PythonFramesTest(unittest.TestCase):
    found = []

    @classmethod
    def setUpClass(cls):
        cls.found = interpreters()
        print("\nPython interpreters exercised: " +
              ", ".join("%s (%s)" % (v, p) for p, _, v in cls.found), file=sys.stderr)

    def supported(self):
        return [(p, v, text) for p, v, text in self.found if v in SUPPORTED]

    def test_some_supported_interpreter_exists(self):
        # Without one nothing below proves anything.
        self.assertTrue(self.supported(), "no CPython 3.10 to 3.13 found: %s" % self.found)

    def test_misuse_is_reported_at_the_python_lines(self):
        expected = markers(PROGRAM, "MISUSE")
        allocs = markers(PROGRAM, "ALLOC")
        self.assertGreaterEqual(len(expected), 6)
        native_line = markers(COPIER_SOURCE, "MISUSE")[0][1]
        for python, version, text_version in self.supported():
            with self.subTest(python=text_version):
                out, data, text = run(python, PROGRAM, "misuse-" + text_version)
                self.assertIn("python_misuse: ok", out)
                process = data["processes"][0]
                self.assertTrue(process["trace_complete"])
                self.assertEqual(process["python"], text_version)
                self.assertTrue(process["python_frames"])
                findings = data["findings"]
                for rule, line in expected:
                    hits = [f for f in findings if f["rule"] == rule and f["site"]
                            and (f["site"]["file"] or "") == PROGRAM and f["site"]["line"] == line]
                    self.assertTrue(hits, "%s: no %s at %s:%d; got %s" %
                                    (text_version, rule, PROGRAM, line, describe(findings)))
                    f = hits[0]
                    self.assertTrue(f["site"]["python"])
                    self.assertEqual(f["site"]["python_status"], "frames")
                    # The native frames stay in the stack, below the Python ones.
                    self.assertTrue(any(not fr["python"] for fr in f["stack"]))
                    # ...and the callers of the site (main, or Thread.run).
                    callers = {fr["function"] for fr in f["stack"] if fr["python"]}
                    self.assertTrue(callers & {"main", "Thread.run", "run"}, callers)
                    self.assertIn("%s:%d" % (PROGRAM, line), text)
                    # A Python program without a framework: the fix speaks of
                    # Python's buffers where the rule has such a text.
                    self.assertEqual(f["framework"], "python")
                    if rule == "pageable-hot":
                        self.assertIn("cuMemHostAlloc", f["fix"])
                        self.assertIn("cudaMallocHost", f["generic_fix"])
                for rule, line in allocs:
                    sites = [s for f in findings if f["rule"] == rule
                             for s in sites_in(f["evidence"])]
                    self.assertTrue(any(s.get("file") == PROGRAM and s.get("line") == line
                                        for s in sites),
                                    "%s: allocation %s:%d not in %s" % (text_version, PROGRAM,
                                                                       line, sites))
                native = [f for f in findings if f["site"] and
                          (f["site"]["file"] or "").endswith(COPIER_SOURCE)]
                self.assertTrue(native, "%s: the native thread's copies: %s" %
                                (text_version, describe(findings)))
                self.assertEqual(native[0]["site"]["line"], native_line)
                self.assertEqual(native[0]["site"]["python_status"], "no_thread_state")
                self.assertFalse(native[0]["site"]["python"])
                self.assertIn("[thread without a Python state]", text)
                # Every finding has a site: none is left at libffi or the interpreter.
                for f in findings:
                    self.assertNotIn("libffi", f["site"].get("module") or "", describe([f]))

    def test_layouts_match_the_headers(self):
        compiler = shutil.which("cc") or shutil.which("gcc")
        self.assertTrue(compiler, "no C compiler to read the headers with")
        ours = {}
        for line in subprocess.run([LAYOUT_DUMP], capture_output=True, text=True,
                                   check=True).stdout.split("\n"):
            if line:
                version, field, value = line.split()
                ours[(version, field)] = int(value)
        compared = []
        probe_src = os.path.join(TMP, "layout_probe.c")
        with open(probe_src, "w") as f:
            f.write(LAYOUT_PROBE)
        for python, version, text_version in self.supported():
            include = subprocess.run([python, "-c", "import sysconfig; "
                                      "print(sysconfig.get_paths()['include'])"],
                                     capture_output=True, text=True).stdout.strip()
            if not os.path.exists(os.path.join(include, "internal")):
                print("%s: no internal headers at %s; layout not compared" %
                      (text_version, include), file=sys.stderr)
                continue
            with self.subTest(python=text_version):
                binary = os.path.join(TMP, "layout_probe_%s" % text_version)
                build = subprocess.run([compiler, "-I", include, "-o", binary, probe_src],
                                       capture_output=True, text=True)
                self.assertEqual(build.returncode, 0, build.stderr[-2000:])
                out = subprocess.run([binary], capture_output=True, text=True, check=True).stdout
                fields = 0
                for line in out.split("\n"):
                    if not line:
                        continue
                    v, field, value = line.split()
                    self.assertEqual(ours.get((v, field)), int(value),
                                     "%s %s: pinshim has %s, the headers say %s" %
                                     (text_version, field, ours.get((v, field)), value))
                    fields += 1
                self.assertGreaterEqual(fields, 24)
                compared.append(text_version)
        print("structure layouts compared with the headers of: %s" % (compared or "none"),
              file=sys.stderr)
        if not compared and not os.environ.get("PINSHIM_REQUIRE_PYTHON_HEADERS"):
            self.skipTest("no interpreter with internal headers here")
        # CI installs python3-dev, whose headers this needs (and says so).
        self.assertTrue(compared, "no interpreter with internal headers found")

    def test_line_tables_match_the_interpreters(self):
        for python, version, text_version in self.supported():
            with self.subTest(python=text_version):
                dump = subprocess.run([python, "-c", DUMP_LINES], capture_output=True, text=True,
                                      timeout=300)
                self.assertEqual(dump.returncode, 0, dump.stderr[-2000:])
                check = subprocess.run([LINE_CHECK, "310" if version == (3, 10) else "311"],
                                       input=dump.stdout, capture_output=True, text=True,
                                       timeout=300)
                print("%s: %s" % (text_version, check.stdout.strip()), file=sys.stderr)
                self.assertEqual(check.returncode, 0, check.stdout)

    def test_python_frames_off(self):
        python, version, text_version = self.supported()[0]
        _, data, _ = run(python, PROGRAM, "off-" + text_version, {"PINSHIM_PYTHON_FRAMES": "0"})
        findings = data["findings"]
        self.assertTrue(findings)
        self.assertFalse(data["processes"][0]["python_frames"])
        for f in findings:
            self.assertNotIn("python_status", f["site"])
            self.assertFalse(any(fr["python"] for fr in f["stack"]))

    def test_unsupported_versions_run_unharmed_and_are_labelled(self):
        others = [(p, v, t) for p, v, t in self.found if v not in SUPPORTED]
        if not others:
            self.skipTest("no Python outside 3.10 to 3.13 installed here")
        for python, version, text_version in others:
            with self.subTest(python=text_version):
                out, data, _ = run(python, PROGRAM, "other-" + text_version)
                self.assertIn("python_misuse: ok", out)
                self.assertTrue(data["findings"])
                for f in data["findings"]:
                    self.assertEqual(f["site"]["python_status"], "unsupported_version")
                    self.assertFalse(any(fr["python"] for fr in f["stack"]))

    def test_frames_that_come_and_go(self):
        # Same output with and without pinshim, a whole trace, and the copies
        # found at their line however deep, in generators, coroutines,
        # handlers and code compiled on the fly.
        line = line_of(STRESS, "def copy(") + 1
        for python, version, text_version in self.supported():
            with self.subTest(python=text_version):
                env = dict(os.environ, LD_LIBRARY_PATH=":".join(
                    p for p in (FAKECUDA, os.environ.get("LD_LIBRARY_PATH")) if p))
                plain = subprocess.run([python, STRESS, "6"], env=env, capture_output=True,
                                       text=True, timeout=300)
                self.assertEqual(plain.returncode, 0, plain.stderr[-2000:])
                out, data, _ = run(python, STRESS, "stress-" + text_version, args=["6"])
                self.assertEqual(out, plain.stdout)
                self.assertIn("python_stress: ok", out)
                process = data["processes"][0]
                self.assertTrue(process["trace_complete"])
                self.assertIsNone(process["damage"])
                hot = [f for f in data["findings"] if f["rule"] == "pageable-hot"]
                self.assertTrue(hot, describe(data["findings"]))
                self.assertEqual((hot[0]["site"]["file"], hot[0]["site"]["line"]), (STRESS, line))
                self.assertEqual(hot[0]["site"]["python_status"], "frames")

    def test_an_interpreter_loaded_later(self):
        # A program that loads libpython itself after pinshim started: its
        # copies carry Python frames too. PYTHONHOME is the installation's
        # base prefix: a virtual environment's prefix holds no standard
        # library.
        tried = 0
        for python, version, text_version in self.supported():
            paths = subprocess.run([python, "-c", "import sys, sysconfig, os; "
                                    "print(sys.base_prefix); print(os.path.join("
                                    "sysconfig.get_config_var('LIBDIR') or '', "
                                    "sysconfig.get_config_var('INSTSONAME') or ''))"],
                                   capture_output=True, text=True).stdout.split("\n")
            prefix, lib = paths[0], paths[1]
            if not os.path.isfile(lib):
                print("%s: no shared libpython (%s)" % (text_version, lib), file=sys.stderr)
                continue
            tried += 1
            with self.subTest(python=text_version):
                out, data, _ = run(EMBED, lib, "embed-" + text_version,
                                   {"PYTHONHOME": prefix, "NATIVE_COPIER": ""},
                                   args=[PROGRAM])
                self.assertIn("python_misuse: ok", out)
                line = [n for r, n in markers(PROGRAM, "MISUSE") if r == "pageable-hot"][0]
                hits = [f for f in data["findings"] if f["rule"] == "pageable-hot" and
                        f["site"]["file"] == PROGRAM and f["site"]["line"] == line]
                self.assertTrue(hits, describe(data["findings"]))
                self.assertEqual(data["processes"][0]["python"], None)  # found after start
        self.assertGreater(tried, 0, "no interpreter with a shared libpython")

    def test_subinterpreters_are_labelled(self):
        enters = line_of(SUBINTERPRETER, "ENTERS-SUBINTERPRETER")
        for python, version, text_version in self.supported():
            with self.subTest(python=text_version):
                out, data, text = run(python, SUBINTERPRETER, "sub-" + text_version)
                self.assertIn("python_subinterpreter: ok", out)
                findings = data["findings"]
                by_function = {f["site"]["function"]: f for f in findings if f["site"]}
                thread = by_function.get("copy_in_sub_thread")
                self.assertIsNotNone(thread, describe(findings))
                self.assertEqual(thread["site"]["python_status"], "subinterpreter")
                self.assertIn("[in a subinterpreter]", text)
                if version >= (3, 12):
                    held = by_function.get("copy_in_sub_with_gil")
                    self.assertIsNotNone(held, describe(findings))
                    self.assertEqual(held["site"]["python_status"], "subinterpreter")
                else:
                    # docs/limits.md, Python frames: before 3.12 the thread's running state
                    # is not its own to read, so copies made with the GIL held
                    # inside a subinterpreter entered from this thread are
                    # reported at the line that entered it.
                    entered = [f for f in findings if f["site"]["file"] == SUBINTERPRETER and
                               f["site"]["line"] == enters]
                    self.assertTrue(entered, describe(findings))
                    print("expected limit (%s): copies with the GIL held in a subinterpreter "
                          "reported at the line that entered it" % text_version, file=sys.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
