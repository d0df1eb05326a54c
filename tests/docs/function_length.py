"""Functions over the length limit in shim/ and analyzer/ (tests left out).

A function's length is the number of lines from its body's opening brace to
its closing brace, both counted. Bodies are found by matching braces in the
source with comments, string and character literals and preprocessor lines
blanked out: a brace block at namespace, class or extern "C" scope whose
text since the previous statement has a parenthesis is a function body
(members' brace initializers in a constructor's list are skipped); one that
follows "=" is an initializer. A lambda counts as part of the function that
holds it.

A function may stay longer where a table or a switch of one-line cases reads
better whole: a comment "// length: REASON" on one of the three lines before
its signature names the exception. Functions that other work is reshaping
are listed, each with its reason, in function_length_allowlist.txt beside
this file ("PATH FUNCTION # REASON"); an entry that no longer matches a long
function is reported too, so the list only shrinks.

    python3 tests/docs/function_length.py [ROOT]   (exit 1: offenders listed)
"""
import os
import re
import sys

LIMIT = 80
FOLDERS = ("shim", "analyzer")
SUFFIXES = (".cc", ".h", ".c", ".inc")
ALLOWLIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "function_length_allowlist.txt")
EXCEPTION = re.compile(r"//\s*length:\s*\S")
SCOPE = re.compile(r"^(?:template\s*<.*>\s*)?(?:typedef\s+)?(?:class|struct|union|enum|namespace)\b|"
                   r"^extern\s*\"C\"\s*$|^extern\s*$", re.S)
CTOR_INIT = re.compile(r"\)\s*(?:noexcept\s*)?:(?!:)")


def is_test(rel):
    base = os.path.basename(rel)
    return (re.search(r"_test(lib|_util|_main)?\.(cc|h)$", base) is not None or
            base in ("test_util.h",) or "/testdata/" in rel or base.endswith("_fuzzer.cc"))


def blank(text):
    """The text with comments, literals and preprocessor lines replaced by
    spaces (newlines kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":
            # A preprocessor line, with its continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def assigns(header):
    """Whether the header has an "=" outside parentheses and brackets (an
    initializer: a variable's, or a lambda's given to one)."""
    depth = 0
    for k, ch in enumerate(header):
        if ch in "([<" and not (ch == "<" and header[k + 1:k + 2] in "<="):
            depth += ch != "<"
        elif ch in ")]":
            depth -= 1
        elif ch == "=" and depth == 0:
            around = header[k - 1:k] + header[k + 1:k + 2]
            if "=" in around or header[k - 1:k] in "!<>+-*/%&|^" or \
                    re.search(r"operator\s*\S*$", header[:k]):
                continue
            return True
    return False


def match_brace(text, i):
    """Index of the brace that closes the one at i."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


def name_of(header):
    """The function's name in its header text: the identifier before the
    first parenthesis at depth 0 (operators and qualified names kept;
    attributes left out)."""
    header = re.sub(r"__attribute__\s*\(\(.*?\)\)|\[\[.*?\]\]|alignas\s*\([^)]*\)", " ", header, flags=re.S)
    depth = 0
    for k, ch in enumerate(header):
        if ch == "<" and depth == 0 and header[:k].rstrip().endswith("operator"):
            continue
        if ch == "(" and depth == 0:
            m = re.search(r"((?:[\w~]+::)*(?:operator\s*\S+?|~?\w+))\s*$", header[:k])
            if m:
                return re.sub(r"\s+", "", m.group(1))
            depth += 1
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
    return "?"


def functions(text):
    """(name, first line, length, signature line) of each function body."""
    clean = blank(text)
    found = []
    line_of = lambda k: clean.count("\n", 0, k) + 1

    def scan(lo, hi):
        stmt = lo  # where the text of the current statement starts
        i = lo
        while i < hi:
            ch = clean[i]
            if ch in ";}":
                stmt = i + 1
            elif ch == "{":
                header = clean[stmt:i].strip()
                if SCOPE.match(header):
                    end = match_brace(clean, i)
                    scan(i + 1, end)
                    i, stmt = end, end + 1
                elif assigns(header) or header.endswith((",", "(")) or "(" not in header:
                    i = match_brace(clean, i)  # an initializer, or a block we do not judge
                    if assigns(header) or not header:
                        stmt = i + 1
                elif CTOR_INIT.search(header) and re.search(r"[\w>]\s*$", header) and not re.search(
                        r"\)\s*(const|noexcept|override|final|\s)*$", header):
                    i = match_brace(clean, i)  # a member's brace initializer
                else:
                    end = match_brace(clean, i)
                    sig = stmt + (len(clean[stmt:i]) - len(clean[stmt:i].lstrip()))
                    first, last = line_of(i), line_of(end)
                    found.append((name_of(header), first, last - first + 1, line_of(sig)))
                    i, stmt = end, end + 1
            i += 1

    scan(0, len(clean))
    return found


def load_allowlist(path=ALLOWLIST):
    entries = {}
    if not os.path.exists(path):
        return entries
    with open(path) as f:
        for number, line in enumerate(f, 1):
            body = line.split("#", 1)[0].strip()
            if not body:
                continue
            parts = body.split()
            if len(parts) != 2 or "#" not in line or not line.split("#", 1)[1].strip():
                raise ValueError(f"{path}:{number}: want 'PATH FUNCTION # REASON'")
            entries[(parts[0], parts[1])] = line.split("#", 1)[1].strip()
    return entries


def long_functions(root, folders=FOLDERS):
    """(path, name, line, length, excepted) of every function over LIMIT."""
    out = []
    for folder in folders:
        for d, dirs, files in os.walk(os.path.join(root, folder)):
            dirs[:] = sorted(x for x in dirs if not x.startswith((".", "bazel-")))
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(d, f), root)
                if not f.endswith(SUFFIXES) or is_test(rel):
                    continue
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as src:
                    text = src.read()
                lines = text.split("\n")
                for name, first, length, sig in functions(text):
                    if length <= LIMIT:
                        continue
                    before = lines[max(0, sig - 4):sig - 1]
                    excepted = any(EXCEPTION.search(b) for b in before)
                    out.append((rel, name, first, length, excepted))
    return out


def check(root, allowlist):
    """Problems (offenders and stale allowlist entries) and the list of
    allowlisted functions still long."""
    problems, allowed = [], []
    seen = set()
    for rel, name, line, length, excepted in long_functions(root):
        key = (rel, name)
        if key in allowlist:
            seen.add(key)
            allowed.append(f"{rel}:{line}: {name} ({length} lines) allowed: {allowlist[key]}")
        elif not excepted:
            problems.append(f"{rel}:{line}: {name} is {length} lines (limit {LIMIT}): split it along "
                            f"its steps, or name the exception in a '// length:' comment")
    for key in sorted(set(allowlist) - seen):
        problems.append(f"{ALLOWLIST}: {key[0]} {key[1]} is no longer a long function: remove the entry")
    return problems, allowed


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    problems, allowed = check(root, load_allowlist())
    for a in allowed:
        print(a)
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s), {len(allowed)} allowlisted long function(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
