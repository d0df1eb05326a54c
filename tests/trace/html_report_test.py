"""`pinshim report --format html` in headless Chromium: traces of a Python
program (through ctypes on the simulated driver), rule programs, an
enforce-mode and an optimize-mode run become one page, which must be self-
contained (no request leaves the file), render with no console error,
warning or exception, show every finding of the JSON report with its site,
have the charts and site tables of every process, and draw: screenshots of
the top and of the first process's charts must not be blank. The
screenshots are kept (TEST_UNDECLARED_OUTPUTS_DIR, else TEST_TMPDIR).

The detector itself is checked first on a page that does each bad thing,
so a page that passes was watched by something that can fail it."""

import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import headless_chromium  # noqa: E402

HERE = "tests/trace"
REPORT = os.path.abspath("analyzer/report/pinshim-report")
PRELOAD = os.path.abspath("shim/libpinshim.so")
FAKECUDA = os.path.abspath("tests/fakecuda")
PYTHON_PROGRAM = os.path.abspath(os.path.join(HERE, "programs", "python_misuse.py"))
TMP = os.environ.get("TEST_TMPDIR", "/tmp")
OUTPUTS = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", TMP)

# name -> (command, environment)
RUNS = {
    "python": ([sys.executable if sys.version_info >= (3, 10) else "python3", PYTHON_PROGRAM],
               {"LD_PRELOAD": PRELOAD, "LD_LIBRARY_PATH": FAKECUDA}),
    "pageable_hot": ([os.path.join(HERE, "programs", "pageable_hot")], {}),
    "pinned_churn": ([os.path.join(HERE, "programs", "pinned_churn")], {}),
    "wc_read": ([os.path.join(HERE, "programs", "wc_read")], {}),
    "budget": ([os.path.join(HERE, "programs", "budget_refused")],
               {"PINSHIM_MODE": "enforce", "PINSHIM_BUDGET": str(4 << 20), "PINSHIM_POLICY": "deny"}),
    "optimize": ([os.path.join(HERE, "programs", "optimize_pinning_driver")],
                 {"LD_PRELOAD": PRELOAD, "PINSHIM_MODE": "optimize", "PINSHIM_PIN_CAP": "8M"}),
}

BAD_PAGE = """<!DOCTYPE html><html><body><p>broken</p>
<img src="http://127.0.0.1:9/nothing.png">
<script>console.error("a deliberate console error"); console.warn("a deliberate warning");
throw new Error("a deliberate exception");</script></body></html>"""


def run_all():
    dirs = []
    for name, (command, env_extra) in RUNS.items():
        trace_dir = os.path.join(TMP, "html-traces", name)
        shutil.rmtree(trace_dir, ignore_errors=True)
        env = dict(os.environ, PINSHIM_TRACE_DIR=trace_dir)
        env.update(env_extra)
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise AssertionError("%s exited %d: %s" % (name, proc.returncode, proc.stderr[-2000:]))
        dirs.append(trace_dir)
    return dirs


class HtmlReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.chromium = headless_chromium.find_chromium()
        if cls.chromium is None:
            raise AssertionError("no chromium: scripts/install_test_deps.sh installs Debian's")
        dirs = run_all()
        out = subprocess.run([REPORT, "--format", "json"] + dirs, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        cls.data = json.loads(out.stdout)
        cls.page = os.path.join(TMP, "report.html")
        with open(cls.page, "w") as f:
            html = subprocess.run([REPORT, "--format", "html"] + dirs, capture_output=True,
                                  text=True, timeout=300)
            assert html.returncode == 0, html.stderr
            f.write(html.stdout)
        cls.html = html.stdout

    def browser(self, name):
        return headless_chromium.Chromium(self.chromium, os.path.join(TMP, name + ".chromium.log"))

    def test_the_detector_sees_what_goes_wrong(self):
        bad = os.path.join(TMP, "bad.html")
        with open(bad, "w") as f:
            f.write(BAD_PAGE)
        b = self.browser("bad")
        try:
            b.open("file://" + bad)
            problems = b.problems("file://" + bad)
        finally:
            b.close()
        text = "\n".join(problems)
        self.assertIn("console.error: a deliberate console error", text)
        self.assertIn("console.warning: a deliberate warning", text)
        self.assertIn("a deliberate exception", text)
        self.assertIn("request: http://127.0.0.1:9/nothing.png", text)

    def test_the_page_is_self_contained(self):
        # Nothing to fetch: no external script, style, image, font or frame.
        for pattern in (r"<script[^>]+src=", r"<link[^>]+href=", r"<img[^>]+src=\"(?!data:)",
                        r"<iframe", r"@import", r"url\((?!data:)", r"https?://"):
            self.assertIsNone(re.search(pattern, self.html), pattern)
        self.assertIn("default-src 'none'", self.html)
        # The page's one script runs by its hash; no inline script runs else.
        scripts = re.search(r"script-src ([^;\"]*)", self.html).group(1)
        self.assertNotIn("unsafe-inline", scripts)
        self.assertRegex(scripts, r"^'sha256-[A-Za-z0-9+/]{43}='$")

    def test_renders_every_finding_charts_and_tables_without_errors(self):
        self.assertGreaterEqual(len(self.data["findings"]), 8)
        self.assertEqual(len(self.data["processes"]), len(RUNS))
        url = "file://" + self.page
        b = self.browser("report")
        try:
            b.open(url)
            self.assertEqual(b.evaluate("document.body.getAttribute('data-ready')"), "1",
                             "the page's script did not run to its end")
            text = b.evaluate("document.body.innerText")
            cards = b.evaluate("Array.from(document.querySelectorAll('.finding')).map("
                               "e => [e.dataset.rule, e.querySelector('.site').innerText])")
            sections = b.evaluate(
                "Array.from(document.querySelectorAll('section.process')).map(s => ({"
                "captions: Array.from(s.querySelectorAll('figcaption')).map(c => c.innerText),"
                "lines: s.querySelectorAll('svg path.line').length,"
                "limits: Array.from(s.querySelectorAll('.legend span')).map(l => l.innerText),"
                "rows: s.querySelectorAll('table.sites tbody tr').length}))")
            # Sorting a site table runs script: still no error after it.
            b.evaluate("document.querySelector('table.sites th:nth-child(2)').click(); 1")
            b.pump(0.3)
            top = b.screenshot(os.path.join(OUTPUTS, "html_report_top.png"))
            charts_y = b.evaluate("Math.floor(document.querySelector('#process-0 .charts')"
                                  ".getBoundingClientRect().top + window.scrollY)")
            charts = b.screenshot(os.path.join(OUTPUTS, "html_report_charts.png"), y=charts_y,
                                  height=900)
            problems = b.problems(url)
        finally:
            b.close()
        self.assertEqual(problems, [])
        # Every finding, in the JSON report's order (most severe first), with its site.
        findings = self.data["findings"]
        self.assertEqual([c[0] for c in cards], [f["rule"] for f in findings])
        for (rule, site_text), f in zip(cards, findings):
            site = f["site"]
            if site and site.get("file") and site.get("line"):
                self.assertIn("%s:%d" % (site["file"], site["line"]), site_text)
            self.assertIn(rule, text)
        self.assertIn("python_misuse.py:", text)
        # Charts and site tables of every process.
        self.assertEqual(len(sections), len(RUNS))
        for s in sections:
            self.assertEqual(s["captions"][0], "Pinned memory")
            self.assertTrue(s["captions"][1].startswith("Resident set size (RSS) sampled every"))
            self.assertTrue(s["captions"][2].startswith("Copy throughput by direction"))
            self.assertGreaterEqual(s["lines"], 1)  # every program copies
            self.assertGreaterEqual(s["rows"], 1)
        by_program = {os.path.basename(p["program"]): i for i, p in enumerate(self.data["processes"])}
        python = sections[[i for n, i in by_program.items() if n.startswith("python")][0]]
        # Long enough to be sampled: pinned memory (total, by the program),
        # RSS and two directions of copies at least.
        self.assertGreaterEqual(python["lines"], 5, python)
        by_mode = {p["mode"]: i for i, p in enumerate(self.data["processes"])}
        opt = sections[by_mode["observe,optimize"]]
        self.assertIn("Optimize mode's own pinning", opt["captions"])
        self.assertTrue(any(l.startswith("pin cap") for l in opt["limits"]), opt["limits"])
        # The budget's process: the one with budget decisions.
        enforce = sections[[i for i, p in enumerate(self.data["processes"]) if p["budget"]][0]]
        self.assertTrue(any(l.startswith("budget") for l in enforce["limits"]), enforce["limits"])
        # Drawn, not blank.
        for name, png in (("top", top), ("charts", charts)):
            share, colours = headless_chromium.drawn_share(png)
            print("screenshot %s: %.1f%% drawn, %d colours" % (name, 100 * share, colours),
                  file=sys.stderr)
            self.assertGreater(share, 0.02, name)
            self.assertGreater(colours, 20, name)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
