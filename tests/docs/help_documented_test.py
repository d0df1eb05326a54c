"""Every option and variable that pinshim's help names is documented: each
--option and PINSHIM_ variable printed by `pinshim --help`, `pinshim help
settings` and each command's --help appears in docs/*.md, and each command
option in the manual page (packaging/pinshim.1)."""
import glob
import os
import re
import subprocess
import unittest

RUNFILES = os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"])
PINSHIM = os.path.join(RUNFILES, "analyzer", "pinshim")
COMMANDS = ["run", "report", "export", "fleet", "archive", "status", "calibrate"]
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")
VARIABLE = re.compile(r"\bPINSHIM_[A-Z_]*[A-Z]\b")


def help_text(args):
    out = subprocess.run([PINSHIM] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True,
                         env={"PATH": os.environ.get("PATH", ""),
                              "RUNFILES_DIR": os.environ["TEST_SRCDIR"]})
    assert out.returncode == 0, (args, out.stdout)
    return out.stdout


def mentioned(name, text):
    return re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", text) is not None


class HelpDocumentedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = ""
        for path in sorted(glob.glob(os.path.join(RUNFILES, "docs", "*.md"))):
            with open(path) as f:
                cls.docs += f.read()
        with open(os.path.join(RUNFILES, "packaging", "pinshim.1")) as f:
            cls.man = f.read().replace("\\-", "-")
        cls.helps = {"pinshim --help": help_text(["--help"]),
                     "pinshim help settings": help_text(["help", "settings"])}
        for c in COMMANDS:
            cls.helps["pinshim %s --help" % c] = help_text([c, "--help"])

    def test_every_option_and_variable_is_in_the_docs(self):
        missing = []
        for where, text in self.helps.items():
            for name in set(OPTION.findall(text)) | set(VARIABLE.findall(text)):
                if not mentioned(name, self.docs):
                    missing.append("%s (%s)" % (name, where))
        self.assertEqual(sorted(missing), [])

    def test_every_command_option_is_in_the_manual_page(self):
        missing = []
        for c in COMMANDS:
            for name in set(OPTION.findall(self.helps["pinshim %s --help" % c])):
                if name != "--help" and not mentioned(name, self.man):
                    missing.append("%s (pinshim %s)" % (name, c))
        self.assertEqual(sorted(missing), [])

    def test_the_check_finds_options(self):
        # The run help names its 18 options; a check that found none would pass.
        self.assertGreaterEqual(len(set(OPTION.findall(self.helps["pinshim run --help"]))), 19)
        self.assertFalse(mentioned("--no-such-option", self.docs))


if __name__ == "__main__":
    unittest.main()
