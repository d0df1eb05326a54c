"""Every file a code comment names exists in the repository: a path under
one of the repository's top-level folders ("shim/core/config.h") must exist
there, and a bare name of one of the repository's own kinds of file
("copy_hooks.cc", "RESULTS.md") must be the name of some file in it. A
comment that points a reader at a file that was renamed, removed or never
existed is a wrong map. The checker is first run on files written into a
temporary folder, with references that must fail.

The repository is found as links_test.py finds it (README.md's runfile);
the test is tagged external, so it sees the tree as it is."""
import os
import re
import tempfile
import unittest

from links_test import repository_root

SOURCE = (".cc", ".h", ".c", ".cu", ".py", ".sh", ".inc", ".bzl", ".S", ".lds")
SKIP_DIRS = {".git", "third_party", ".gpu", ".device", "dist", "__pycache__"}
TOP = ("shim/", "analyzer/", "tests/", "bench/", "docs/", "scripts/", ".ci/")
# Bare names of these kinds are the repository's own (system headers and
# other projects' files are named with other suffixes, or with a path).
BARE_KINDS = (".cc", ".md", ".py", ".inc", ".cu", ".sh")
NAME = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.(?:cc|h|md|py|sh|inc|cu|bzl|txt|lds))(?![\w/])")
COMMENT = re.compile(r"^\s*(//|#|/?\*)")
# A comment after code on its line (C-family sources), as the formatter
# writes it: two spaces, then "// ". Paths in string literals are not
# comments.
TRAILING = re.compile(r"\S  // (.*)$")
C_FAMILY = (".cc", ".h", ".c", ".cu", ".inc")
# Files the build generates, which comments may name.
GENERATED = {"driver_abis.inc"}  # tests/fakecuda/BUILD, genrule driver_abis


def tree(root):
    """Relative paths of the files under root, and their base names."""
    paths, names = set(), set()
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("bazel-")]
        for f in files:
            p = os.path.normpath(os.path.join(rel, f))
            paths.add(p)
            names.add(f)
        if rel != ".":
            paths.add(os.path.normpath(rel))
    return paths, names


def comment_lines(path):
    """(number, comment text) of each line holding a comment."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if COMMENT.match(line):
                yield number, line
            elif path.endswith(C_FAMILY):
                trailing = TRAILING.search(line)
                if trailing:
                    yield number, trailing.group(1)


def check_tree(root):
    paths, names = tree(root)
    problems, checked = [], 0
    for rel in sorted(paths):
        base = os.path.basename(rel)
        if not (rel.endswith(SOURCE) or base == "BUILD"):
            continue
        full = os.path.join(root, rel)
        if not os.path.isfile(full):
            continue
        for number, line in comment_lines(full):
            for name in NAME.findall(line):
                name = name.rstrip(".")
                if name.startswith(TOP) and os.path.basename(name) not in GENERATED:
                    checked += 1
                    if os.path.normpath(name) not in paths:
                        problems.append("%s:%d: names %s, which does not exist" % (rel, number, name))
                elif "/" not in name and name.endswith(BARE_KINDS) and name not in GENERATED:
                    checked += 1
                    if name not in names:
                        problems.append("%s:%d: names %s; no file of the repository has that name" %
                                        (rel, number, name))
    return problems, checked


class CheckerTest(unittest.TestCase):
    """The checker on a tree made here: what must fail fails."""

    def test_good_and_bad_references(self):
        root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        os.makedirs(os.path.join(root, "shim", "core"))
        open(os.path.join(root, "shim", "core", "real.h"), "w").close()
        open(os.path.join(root, "RESULTS.md"), "w").close()
        with open(os.path.join(root, "shim", "core", "a.cc"), "w") as f:
            f.write("// See shim/core/real.h and RESULTS.md; cuda.h is a system header.\n"
                    "const char* p = \"shim/core/gone.h\";  // a string, not a comment\n"
                    "// shim/core/gone.h is stale, and so is memory_hooks.cc.\n"
                    "int x;  // after code, as stale: shim/core/old.h\n")
        problems, checked = check_tree(root)
        text = "\n".join(problems)
        self.assertIn("a.cc:3: names shim/core/gone.h", text)
        self.assertIn("a.cc:3: names memory_hooks.cc", text)
        self.assertIn("a.cc:4: names shim/core/old.h", text)
        self.assertEqual(len(problems), 3, text)
        self.assertEqual(checked, 5)


class RepositoryTest(unittest.TestCase):
    def test_every_file_a_comment_names_exists(self):
        root = repository_root()
        problems, checked = check_tree(root)
        print("comment_refs_test: %s: %d references checked" % (root, checked))
        self.assertGreater(checked, 100)
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


if __name__ == "__main__":
    unittest.main()
