"""Runs the packaged pinshim binary: `python -m pinshim ARGS` and the
`pinshim` console script are `<package>/bin/pinshim ARGS`.

The binary replaces this interpreter (exec), so signals, the exit status and
the environment are the binary's own; it finds lib/libpinshim.so beside its
own folder, as an installation under a prefix does.
"""

import os
import sys


def binary_path():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "pinshim")


def main():
    exe = binary_path()
    try:
        os.execv(exe, ["pinshim"] + sys.argv[1:])
    except OSError as e:
        sys.stderr.write("pinshim: cannot run %s: %s\n" % (exe, e.strerror))
        return 127
    return 0  # not reached: exec replaced the process


if __name__ == "__main__":
    sys.exit(main())
