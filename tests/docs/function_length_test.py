"""No function over 80 lines in shim/ and analyzer/ outside tests, except
those named: a "// length:" comment before the signature (a table or a
switch of one-line cases clearer whole), or an entry of
function_length_allowlist.txt (functions other work is reshaping). The
checker (function_length.py) is first run on files written into a
temporary folder, with functions that must fail and ones that must pass.

The repository is found as links_test.py finds it (README.md's runfile);
the test is tagged external, so it sees the tree as it is."""
import os
import tempfile
import unittest

import function_length as fl
from links_test import repository_root


def body(lines):
    return "".join(f"  x += {i};\n" for i in range(lines))


class CheckerTest(unittest.TestCase):
    def run_on(self, files, allowlist=None):
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as root:
            for rel, text in files.items():
                os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
                with open(os.path.join(root, rel), "w") as f:
                    f.write(text)
            return fl.check(root, allowlist or {})

    def test_a_long_function_is_listed_and_fails(self):
        problems, _ = self.run_on({"shim/core/a.cc": "namespace x {\nint Long(int x) {\n" + body(90) + "  return x;\n}\n}\n"})
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("shim/core/a.cc:2: Long is 93 lines", problems[0])

    def test_members_templates_and_attributes_are_named(self):
        text = ("namespace x {\nclass C {\n public:\n  C() : a_(1), b_{2} {\n" + body(85) + "  }\n  int a_, b_;\n};\n"
                "template <typename T>\n__attribute__((noinline)) auto C::Run(T t) const -> int {\n" + body(81) + "}\n}\n")
        problems, _ = self.run_on({"analyzer/b.cc": text})
        self.assertEqual(len(problems), 2, problems)
        self.assertIn(": C is ", problems[0])
        self.assertIn(": C::Run is ", problems[1])

    def test_short_functions_initializers_and_literals_pass(self):
        text = ('const char* kText = "{{{{";\nconst int kTable[] = {\n' + "".join(f"  {i},\n" for i in range(100)) +
                "};\nint Short() {\n  char c = '}';\n  // }\n  return c;\n}\n"
                "#define LONG_MACRO(x) \\\n" + "".join(f"  x += {i}; \\\n" for i in range(100)) + "  x\n")
        problems, _ = self.run_on({"shim/c.cc": text})
        self.assertEqual(problems, [])

    def test_a_named_exception_passes(self):
        text = "// length: a switch of one-line cases\nint Table(int v) {\n" + body(90) + "  return v;\n}\n"
        problems, _ = self.run_on({"shim/d.cc": text})
        self.assertEqual(problems, [])

    def test_tests_are_left_out(self):
        problems, _ = self.run_on({"shim/e_test.cc": "void T() {\n" + body(90) + "}\n"})
        self.assertEqual(problems, [])

    def test_an_allowlisted_function_passes_and_a_stale_entry_fails(self):
        files = {"shim/f.cc": "void Big() {\n" + body(90) + "}\n"}
        problems, allowed = self.run_on(files, {("shim/f.cc", "Big"): "being reshaped"})
        self.assertEqual(problems, [])
        self.assertEqual(len(allowed), 1)
        problems, _ = self.run_on(files, {("shim/f.cc", "Big"): "x", ("shim/f.cc", "Gone"): "y"})
        self.assertEqual(len(problems), 1)
        self.assertIn("Gone is no longer a long function", problems[0])

    def test_the_allowlist_needs_a_reason(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False,
                                         dir=os.environ.get("TEST_TMPDIR")) as f:
            f.write("shim/f.cc Big\n")
        try:
            with self.assertRaises(ValueError):
                fl.load_allowlist(f.name)
        finally:
            os.unlink(f.name)


class RepositoryTest(unittest.TestCase):
    def test_no_new_long_function(self):
        root = repository_root()
        problems, allowed = fl.check(root, fl.load_allowlist())
        self.assertEqual(problems, [], "\n" + "\n".join(problems))
        print("\n".join(allowed))


if __name__ == "__main__":
    unittest.main()
