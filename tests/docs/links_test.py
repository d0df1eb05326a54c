"""Every relative link in README.md and docs/*.md resolves: the file or
folder it names exists in the repository, and a #section it names is a
heading of that Markdown file (GitHub's anchors). Every page in docs/ is
reachable from README.md. Links inside code blocks and code spans are not
links. The checker is first run on pages written into a temporary folder,
with links that must fail, so that the check itself can fail.

The repository is found through README.md's runfile, which Bazel links to
the source tree; the test is tagged external, so it runs on every
invocation and sees the tree as it is."""
import os
import re
import sys
import tempfile
import unittest

# Links to pages that another change adds. An entry is allowed to be missing;
# once the page exists the entry is stale and the test fails until it is
# removed from here.
PENDING = {}

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"(?<!!)\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE = re.compile(r"!\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)  # punctuation, backticks included
    return text.replace(" ", "-")


def anchors(text):
    """Every anchor of a Markdown page, repeated headings numbered as GitHub does."""
    seen = {}
    result = set()
    for _, line in prose_lines(text):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else "%s-%d" % (base, n))
    return result


def links(text):
    """(line number, target) of every link and image in prose."""
    for number, line in prose_lines(text):
        line = CODE_SPAN.sub("", line)
        for pattern in (LINK, IMAGE):
            for m in pattern.finditer(line):
                yield number, m.group(1)


def check_page(root, page):
    """Problems of one page (a path relative to root), one line each; and
    the pages of root it links to."""
    problems = []
    targets = set()
    with open(os.path.join(root, page), encoding="utf-8") as f:
        text = f.read()
    for number, target in links(text):
        where = "%s:%d: %s" % (page, number, target)
        if not target:
            problems.append(where + ": empty link")
            continue
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        if path.startswith("/"):
            problems.append(where + ": absolute path (links must be relative)")
            continue
        resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if resolved == ".." or resolved.startswith("../"):
            problems.append(where + ": leaves the repository")
            continue
        full = os.path.join(root, resolved)
        if not os.path.exists(full):
            if resolved not in PENDING:
                problems.append(where + ": no such file or folder")
            continue
        targets.add(resolved)
        if anchor:
            if not resolved.endswith(".md") or not os.path.isfile(full):
                problems.append(where + ": a #section of something that is not a Markdown page")
                continue
            with open(full, encoding="utf-8") as f:
                if anchor not in anchors(f.read()):
                    problems.append(where + ": no heading gives the anchor #" + anchor)
    return problems, targets


def check_tree(root):
    """(problems, number of pages checked, number of links seen)."""
    docs = os.path.join(root, "docs")
    pages = ["README.md"]
    if os.path.isdir(docs):
        pages += sorted("docs/" + p for p in os.listdir(docs) if p.endswith(".md"))
    problems = []
    linked = {}
    count = 0
    for page in pages:
        found, targets = check_page(root, page)
        problems += found
        linked[page] = targets
        with open(os.path.join(root, page), encoding="utf-8") as f:
            count += sum(1 for _ in links(f.read()))
    # Reachable from README.md through links between these pages.
    reached, todo = {"README.md"}, ["README.md"]
    while todo:
        for target in linked.get(todo.pop(), ()):
            if target in linked and target not in reached:
                reached.add(target)
                todo.append(target)
    for page in pages:
        if page not in reached:
            problems.append(page + ": not reachable from README.md")
    for pending in sorted(PENDING):
        if os.path.exists(os.path.join(root, pending)):
            problems.append("%s exists now: remove it from PENDING in tests/docs/links_test.py"
                            % pending)
    return problems, len(pages), count


def repository_root():
    here = os.path.realpath("README.md")
    if not os.path.isfile(here):
        sys.exit("links_test: README.md is not among the test's runfiles")
    return os.path.dirname(here)


class CheckerTest(unittest.TestCase):
    """The checker on pages made here: what must fail fails."""

    def setUp(self):
        self.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        os.makedirs(os.path.join(self.root, "docs"))
        os.makedirs(os.path.join(self.root, "src"))
        open(os.path.join(self.root, "src", "a.cc"), "w").close()

    def write(self, page, text):
        with open(os.path.join(self.root, page), "w", encoding="utf-8") as f:
            f.write(text)

    def test_good_links_pass(self):
        self.write("README.md", "# Top\n\nSee [guide](docs/guide.md#the-summarys-line) and "
                   "[code](src/a.cc), [web](https://example.org), [here](#top).\n")
        self.write("docs/guide.md", "# Guide\n\n## The summary's line\n\n"
                   "[back](../README.md) [again](guide.md#guide)\n"
                   "```\n[not a link](nowhere.md)\n```\n`[nor](this.md)`\n")
        problems, pages, count = check_tree(self.root)
        self.assertEqual(problems, [])
        self.assertEqual((pages, count), (2, 6))

    def test_bad_links_fail(self):
        self.write("README.md", "[a](docs/guide.md) [b](docs/gone.md) [c](docs/guide.md#nope) "
                   "[d](../outside.md) [e](/etc/passwd) [f](src/a.cc#x)\n")
        self.write("docs/guide.md", "# Guide\n")
        self.write("docs/orphan.md", "# Orphan\n")
        problems, _, _ = check_tree(self.root)
        text = "\n".join(problems)
        self.assertIn("docs/gone.md: no such file", text)
        self.assertIn("no heading gives the anchor #nope", text)
        self.assertIn("leaves the repository", text)
        self.assertIn("absolute path", text)
        self.assertIn("not a Markdown page", text)
        self.assertIn("docs/orphan.md: not reachable from README.md", text)
        self.assertEqual(len(problems), 6, text)

    def test_repeated_headings_are_numbered(self):
        self.assertEqual(anchors("# A\n## A\n## `A`\n"), {"a", "a-1", "a-2"})
        self.assertEqual(slug("Queued copies: `free-in-flight` and `copy-race`"),
                         "queued-copies-free-in-flight-and-copy-race")
        self.assertEqual(slug("Profiles (`--profile-out FILE`)"), "profiles---profile-out-file")


class RepositoryTest(unittest.TestCase):
    def test_every_relative_link_resolves(self):
        root = repository_root()
        problems, pages, count = check_tree(root)
        print("links_test: %s: %d pages, %d links" % (root, pages, count))
        self.assertGreater(pages, 1)
        self.assertGreater(count, 0)
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


if __name__ == "__main__":
    unittest.main()
