"""The packages scripts/package.sh makes, built from this build's pinshim and
libpinshim.so by packaging/make_packages.py, each installed into a scratch
root or a virtual environment under TEST_TMPDIR: the installed pinshim
traces the bundled example against the simulated driver and reports on it,
finding its own library with no environment variables.

Needs dpkg-deb, dpkg-shlibdeps (dpkg-dev), patchelf, binutils and Python's
venv with ensurepip (python3-venv): scripts/install_test_deps.sh."""
import glob
import gzip
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import unittest
import zipfile

RUNFILES = os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"])
TMP = tempfile.mkdtemp(prefix="packages.", dir=os.environ.get("TEST_TMPDIR"))
DIST = os.path.join(TMP, "dist")
FAKECUDA = os.path.join(RUNFILES, "tests", "fakecuda")
EXAMPLE = os.path.join(RUNFILES, "tests", "programs", "copy_loop_example")
TRIPLET = "x86_64-linux-gnu"


def read_version():
    with open(os.path.join(RUNFILES, "analyzer", "version.h")) as f:
        return re.search(r'kPinshimVersion\[\] = "([^"]+)"', f.read()).group(1)


VERSION = read_version()


def run(args, env=None, **kwargs):
    return subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, errors="replace", env=env,
                          **kwargs).stdout


def clean_env(**extra):
    """The environment without pinshim's settings, with the simulated
    driver on the library path and no config file."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PINSHIM_") and k != "LD_PRELOAD"}
    env["PINSHIM_CONFIG"] = ""
    env["LD_LIBRARY_PATH"] = FAKECUDA
    env["HOME"] = TMP
    env.update(extra)
    return env


def build_packages():
    env = dict(os.environ, SOURCE_DATE_EPOCH="1700000000")
    run(["python3", os.path.join(RUNFILES, "packaging", "make_packages.py"),
         "--pinshim", os.path.join(RUNFILES, "analyzer", "pinshim"),
         "--library", os.path.join(RUNFILES, "shim", "libpinshim.so"),
         "--source", RUNFILES, "--out", DIST], env=env)


def one(pattern):
    found = glob.glob(os.path.join(DIST, pattern))
    assert len(found) == 1, "%s: %s" % (pattern, found)
    return found[0]


def sections(path):
    return run(["readelf", "-S", "-W", path])


def build_id(path):
    m = re.search(r"Build ID: ([0-9a-f]+)", run(["readelf", "-n", path]))
    return m.group(1) if m else None


class TracedRun:
    """Runs the example under an installed pinshim, then its report."""

    def check(self, test, command, name, via_python=None):
        trace_dir = os.path.join(TMP, "trace-" + name)
        out = run(command + ["run", "--trace-dir", trace_dir, "--summary", "--", EXAMPLE],
                  env=clean_env())
        test.assertIn("pinshim: totals copies=40", out)
        traces = glob.glob(os.path.join(trace_dir, "*.pstrace"))
        test.assertEqual(len(traces), 1, out)
        report = run((via_python or command) + ["report", trace_dir], env=clean_env())
        test.assertIn("pageable-hot", report)
        # Symbolized with the packaged pinshim's own libdw.
        test.assertIn("copy_loop_example.cc:", report)
        return report


class PackagesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        build_packages()

    def test_files_and_checksums(self):
        names = sorted(os.listdir(DIST))
        self.assertEqual(names, sorted([
            "SHA256SUMS", "pinshim_%s_amd64.deb" % VERSION,
            os.path.basename(one("pinshim-%s-py3-none-manylinux_2_*_x86_64.whl" % VERSION)),
            "pinshim-%s-linux-x86_64.tar.gz" % VERSION,
            "pinshim-%s-linux-x86_64-debug.tar.gz" % VERSION]))
        out = run(["sha256sum", "-c", "SHA256SUMS"], cwd=DIST)
        self.assertEqual(out.count(": OK"), 4, out)

    def test_deb_control(self):
        deb = one("pinshim_*_amd64.deb")
        field = lambda name: run(["dpkg-deb", "-f", deb, name]).strip()
        self.assertEqual(field("Package"), "pinshim")
        self.assertEqual(field("Version"), VERSION)
        self.assertEqual(field("Architecture"), "amd64")
        depends = [d.strip() for d in field("Depends").split(",")]
        names = [d.split()[0] for d in depends]
        for needed in ("libunwind8", "libdw1", "libelf1", "libc6"):
            self.assertIn(needed, names)
        # Each declared dependency is a package installed here, at a
        # version that satisfies it (the build machine runs the binaries).
        for dep in depends:
            m = re.match(r"(\S+)(?: \((\S+) (\S+)\))?$", dep)
            installed = run(["dpkg-query", "-W", "-f=${Version}", m.group(1)]).strip()
            if m.group(2):
                subprocess.run(["dpkg", "--compare-versions", installed, m.group(2),
                                m.group(3)], check=True)

    def test_deb_installs_into_scratch_root_and_runs(self):
        deb = one("pinshim_*_amd64.deb")
        root = os.path.join(TMP, "root")
        os.makedirs(os.path.join(root, "var/lib/dpkg/info"))
        os.makedirs(os.path.join(root, "var/lib/dpkg/updates"))
        open(os.path.join(root, "var/lib/dpkg/status"), "w").close()
        # Its dependencies are this machine's; the scratch root has none.
        run(["dpkg", "--root=" + root, "--log=/dev/null", "--force-depends",
             "--force-not-root", "-i", deb])
        exe = os.path.join(root, "usr/bin/pinshim")
        lib = os.path.join(root, "usr/lib", TRIPLET, "pinshim/libpinshim.so")
        for path in (exe, lib):
            self.assertNotIn(".debug_info", sections(path))
        self.assertEqual(oct(os.stat(lib).st_mode & 0o777), "0o644")
        with gzip.open(os.path.join(root, "usr/share/man/man1/pinshim.1.gz"), "rt") as f:
            man = f.read()
        self.assertIn(".TH PINSHIM 1", man)
        for command in ("run", "report", "export", "fleet", "archive", "status", "calibrate"):
            self.assertIn(".B pinshim %s" % command, man)
        self.assertIn("Apache-2.0",
                      open(os.path.join(root, "usr/share/doc/pinshim/copyright")).read())
        with gzip.open(os.path.join(root, "usr/share/doc/pinshim/changelog.gz"), "rt") as f:
            self.assertTrue(f.readline().startswith("pinshim (%s) " % VERSION))
        self.assertEqual(run([exe, "--version"]).strip(), "pinshim " + VERSION)
        out = run([exe, "run", "--", "env"], env=clean_env())
        self.assertIn("LD_PRELOAD=" + os.path.realpath(lib), out.splitlines())
        self.assertIn("usage: pinshim fleet", run([exe, "fleet", "--help"]))
        TracedRun().check(self, [exe], "deb")

    def test_wheel_in_virtual_environment(self):
        wheel = one("pinshim-*.whl")
        venv = os.path.join(TMP, "venv")
        run(["python3", "-m", "venv", venv])
        pip_env = clean_env(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
                            PIP_NO_CACHE_DIR="1")
        run([os.path.join(venv, "bin", "pip"), "install", "--no-deps", wheel], env=pip_env)
        exe = os.path.join(venv, "bin", "pinshim")
        python = os.path.join(venv, "bin", "python")
        self.assertEqual(run([exe, "--version"]).strip(), "pinshim " + VERSION)
        out = run([exe, "run", "--", "env"], env=clean_env())
        preload = [l for l in out.splitlines() if l.startswith("LD_PRELOAD=")]
        self.assertEqual(len(preload), 1, out)
        package = os.path.realpath(glob.glob(os.path.join(
            venv, "lib", "python3*", "site-packages", "pinshim"))[0])
        self.assertEqual(preload[0], "LD_PRELOAD=" + os.path.join(package, "lib", "libpinshim.so"))
        out = run([python, "-m", "pinshim", "run", "--", "env"], env=clean_env())
        self.assertIn(preload[0], out.splitlines())
        # The libraries a system may lack come from the wheel.
        ldd = run(["ldd", os.path.join(package, "bin", "pinshim")])
        for lib in ("libdw.so.1", "libelf.so.1"):
            self.assertIn("%s => %s/bin/../lib/%s" % (lib, package, lib), ldd)
        ldd = run(["ldd", os.path.join(package, "lib", "libpinshim.so")])
        self.assertIn("libunwind.so.8 => %s/lib/libunwind.so.8" % package, ldd)
        self.assertIn("usage: pinshim fleet", run([exe, "fleet", "--help"]))
        TracedRun().check(self, [exe], "wheel", via_python=[python, "-m", "pinshim"])

    def test_wheel_metadata(self):
        wheel = one("pinshim-*.whl")
        glibc = int(re.search(r"manylinux_2_(\d+)_x86_64", wheel).group(1))
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
            record = z.read("pinshim-%s.dist-info/RECORD" % VERSION).decode()
            tag = z.read("pinshim-%s.dist-info/WHEEL" % VERSION).decode()
            exe_mode = z.getinfo("pinshim/bin/pinshim").external_attr >> 16
        self.assertIn("Root-Is-Purelib: false", tag)
        for name in names:
            self.assertIn(name + ",", record)
        self.assertTrue(exe_mode & 0o111)
        # Debian 12 has glibc 2.36, Ubuntu 22.04 2.35.
        self.assertLessEqual(glibc, 35)

    def test_archive_and_debug_symbols(self):
        top = "pinshim-%s-linux-x86_64" % VERSION
        where = os.path.join(TMP, "archive")
        for name in (top + ".tar.gz", top + "-debug.tar.gz"):
            with tarfile.open(os.path.join(DIST, name)) as t:
                t.extractall(where)
        prefix = os.path.join(where, top)
        for binary, debug in (("bin/pinshim", "bin/.debug/pinshim.debug"),
                              ("lib/libpinshim.so", "lib/.debug/libpinshim.so.debug")):
            binary, debug = os.path.join(prefix, binary), os.path.join(prefix, debug)
            self.assertNotIn(".debug_info", sections(binary))
            self.assertIn(".gnu_debuglink", sections(binary))
            self.assertIn(".debug_info", sections(debug))
            self.assertIsNotNone(build_id(binary))
            self.assertEqual(build_id(binary), build_id(debug))
            link = run(["readelf", "--string-dump=.gnu_debuglink", binary])
            self.assertIn(os.path.basename(debug), link)
        self.assertIn("usage: pinshim fleet", run([os.path.join(prefix, "bin/pinshim"), "fleet",
                                                   "--help"]))
        unstripped = os.path.getsize(os.path.join(RUNFILES, "analyzer", "pinshim"))
        self.assertLess(os.path.getsize(os.path.join(prefix, "bin/pinshim")), unstripped / 4)
        exe = os.path.join(prefix, "bin", "pinshim")
        TracedRun().check(self, [exe], "archive")


if __name__ == "__main__":
    unittest.main()
