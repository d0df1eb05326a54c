#!/usr/bin/env python3
"""Assembles pinshim's packages from a built pinshim and libpinshim.so.

    make_packages.py --pinshim FILE --library FILE --source ROOT --out DIR

writes into DIR, for the version in ROOT/analyzer/version.h (the one source
of the version number):

  pinshim_<v>_amd64.deb                       Debian package (dpkg-deb)
  pinshim-<v>-py3-none-manylinux_2_<N>_x86_64.whl   Python wheel
  pinshim-<v>-linux-x86_64.tar.gz             release archive, stripped
  pinshim-<v>-linux-x86_64-debug.tar.gz       its debug symbols
  SHA256SUMS

Nothing is compiled and nothing is downloaded. It needs strip and objcopy
(binutils), dpkg-deb, dpkg-shlibdeps (dpkg-dev, for the package's
dependencies), patchelf (the wheel's RUNPATHs) and ldd. File dates are
SOURCE_DATE_EPOCH when it is set, so the same inputs give the same files.
"""

import argparse
import base64
import csv
import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

ARCH = "amd64"
TRIPLET = "x86_64-linux-gnu"
MAINTAINER = "pinshim maintainers <maintainers@pinshim.invalid>"
SUMMARY = "host<->device copy problems in unmodified CUDA programs"
DESCRIPTION = """\
pinshim is preloaded into an unmodified CUDA program (an nvcc-built
program, PyTorch, CuPy, a driver-API program) and sees every copy
between host and device, every pinned allocation and every large host
allocation. `pinshim run` runs a program under it; `pinshim report`
names each misuse of host memory at the program's own line, with a fix.
Its optimize mode makes pageable copies run at pinned speed, and its
enforce mode caps pinned memory per process and per node."""

# Libraries every Debian 12 and Ubuntu 22.04 (or later) system has: the C
# library's, the compiler's runtime, and the compression libraries dpkg
# itself depends on. Everything else a binary needs goes into the wheel.
SYSTEM_LIBRARIES = {
    "linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libdl.so.2",
    "libpthread.so.0", "librt.so.1", "libstdc++.so.6", "libgcc_s.so.1", "libz.so.1",
    "liblzma.so.5", "libbz2.so.1.0", "libzstd.so.1",
}


def fail(message):
    sys.stderr.write("make_packages: %s\n" % message)
    sys.exit(1)


def run(args, **kwargs):
    try:
        return subprocess.run(args, check=True, stdout=subprocess.PIPE, universal_newlines=True,
                              **kwargs).stdout
    except FileNotFoundError:
        fail("%s is not installed (scripts/package.sh installs what packaging needs)" % args[0])
    except subprocess.CalledProcessError as e:
        fail("%s failed with status %d" % (" ".join(args), e.returncode))


def read_version(source):
    path = os.path.join(source, "analyzer", "version.h")
    with open(path) as f:
        m = re.search(r'kPinshimVersion\[\]\s*=\s*"([0-9][0-9A-Za-z.+~-]*)"', f.read())
    if not m:
        fail("no kPinshimVersion in %s" % path)
    return m.group(1)


def file_date():
    return int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))


def install_file(src, dst, mode):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copyfile(src, dst)
    os.chmod(dst, mode)


# --- stripping ---------------------------------------------------------------

def split_debug(binary, stage, name):
    """Copies `binary` to stage/name stripped, its debug symbols to
    stage/name.debug, linked by .gnu_debuglink. Returns both paths."""
    stripped = os.path.join(stage, name)
    debug = stripped + ".debug"
    shutil.copyfile(binary, stripped)
    os.chmod(stripped, 0o755)
    run(["objcopy", "--only-keep-debug", "--compress-debug-sections", stripped, debug])
    run(["strip", "--strip-unneeded", "--remove-section=.comment", stripped])
    run(["objcopy", "--add-gnu-debuglink=" + debug, stripped], cwd=stage)
    os.chmod(debug, 0o644)
    return stripped, debug


# --- the Debian package ------------------------------------------------------

def shlib_depends(files):
    """The Depends line dpkg-shlibdeps derives from the files' NEEDED
    entries and the installed packages' symbols files."""
    work = tempfile.mkdtemp(prefix="pinshim-shlibdeps.")
    try:
        os.makedirs(os.path.join(work, "debian"))
        with open(os.path.join(work, "debian", "control"), "w") as f:
            f.write("Source: pinshim\n\nPackage: pinshim\nArchitecture: %s\n" % ARCH)
        out = run(["dpkg-shlibdeps", "-O"] + [os.path.abspath(p) for p in files], cwd=work,
                  stderr=subprocess.DEVNULL)
    finally:
        shutil.rmtree(work)
    m = re.search(r"^shlibs:Depends=(.*)$", out, re.M)
    if not m:
        fail("dpkg-shlibdeps printed no dependencies")
    return m.group(1).strip()


def debian_changelog(version, changelog_md, date):
    """The Debian changelog of a native package, from CHANGELOG.md's entry
    for `version` (its bullet lines)."""
    items = changelog_entry(changelog_md, version)
    stamp = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(date))
    body = "".join("  * %s\n" % item for item in items)
    return "pinshim (%s) unstable; urgency=medium\n\n%s\n -- %s  %s\n" % (
        version, body, MAINTAINER, stamp)


def changelog_entry(changelog_md, version):
    with open(changelog_md) as f:
        text = f.read()
    m = re.search(r"^## \[?%s\]?[^\n]*\n(.*?)(?=^## |\Z)" % re.escape(version), text, re.M | re.S)
    if not m:
        fail("CHANGELOG.md has no entry for version %s" % version)
    items, current = [], None
    for line in m.group(1).splitlines():
        if line.startswith("- "):
            current = line[2:].strip()
            items.append(current)
        elif line.startswith("  ") and current is not None:
            items[-1] += " " + line.strip()
    if not items:
        fail("CHANGELOG.md's entry for %s lists nothing" % version)
    return items


def copyright_text(year):
    return """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: pinshim
Source: the pinshim source repository

Files: *
Copyright: %d The pinshim authors
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
""" % year


def gzip_file(src, dst, date):
    with open(src, "rb") as f:
        data = f.read()
    gzip_bytes(data, dst, date)


def gzip_bytes(data, dst, date):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=date) as g:
            g.write(data)
    os.chmod(dst, 0o644)


def fleet_files(source):
    """(path inside the fleet folder, source path) of `pinshim fleet`'s
    Python package, which the tool finds beside itself
    (analyzer/fleet_command.h)."""
    package = os.path.join(source, "analyzer", "fleet", "pinshim_fleet")
    return [(os.path.join("pinshim_fleet", name), os.path.join(package, name))
            for name in sorted(os.listdir(package)) if name.endswith(".py")]


def build_deb(version, pinshim, library, source, out, date):
    root = tempfile.mkdtemp(prefix="pinshim-deb.")
    os.chmod(root, 0o755)  # the package's "./": mkdtemp makes it 0700
    try:
        install_file(pinshim, os.path.join(root, "usr/bin/pinshim"), 0o755)
        install_file(library, os.path.join(root, "usr/lib", TRIPLET, "pinshim/libpinshim.so"),
                     0o644)
        for name, src in fleet_files(source):
            install_file(src, os.path.join(root, "usr/lib", TRIPLET, "pinshim/fleet", name), 0o644)
        gzip_file(os.path.join(source, "packaging", "pinshim.1"),
                  os.path.join(root, "usr/share/man/man1/pinshim.1.gz"), date)
        doc = os.path.join(root, "usr/share/doc/pinshim")
        os.makedirs(doc)
        with open(os.path.join(doc, "copyright"), "w") as f:
            f.write(copyright_text(time.gmtime(date).tm_year))
        gzip_bytes(debian_changelog(version, os.path.join(source, "CHANGELOG.md"), date).encode(),
                   os.path.join(doc, "changelog.gz"), date)
        write_control(root, version, shlib_depends([pinshim, library]))
        set_dates(root, date)
        path = os.path.join(out, "pinshim_%s_%s.deb" % (version, ARCH))
        run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", root, path],
            env=dict(os.environ, SOURCE_DATE_EPOCH=str(date)))
        return path
    finally:
        shutil.rmtree(root)


def write_control(root, version, depends):
    size_kib, sums = 0, []
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            path = os.path.join(dirpath, name)
            size_kib += (os.path.getsize(path) + 1023) // 1024
            with open(path, "rb") as f:
                sums.append("%s  %s\n" % (hashlib.md5(f.read()).hexdigest(),
                                          os.path.relpath(path, root)))
    meta = os.path.join(root, "DEBIAN")
    os.makedirs(meta)
    description = "\n".join(" " + line for line in DESCRIPTION.splitlines())
    with open(os.path.join(meta, "control"), "w") as f:
        f.write("Package: pinshim\nVersion: %s\nArchitecture: %s\nMaintainer: %s\n"
                "Installed-Size: %d\nDepends: %s\nSuggests: python3-dask, python3-distributed, "
                "python3-pandas\nSection: devel\nPriority: optional\n"
                "Description: %s\n%s\n" % (version, ARCH, MAINTAINER, size_kib, depends,
                                           SUMMARY, description))
    with open(os.path.join(meta, "md5sums"), "w") as f:
        f.writelines(sorted(sums, key=lambda line: line.split("  ", 1)[1]))


def set_dates(root, date):
    for dirpath, dirs, names in os.walk(root):
        for name in dirs + names:
            os.utime(os.path.join(dirpath, name), (date, date), follow_symlinks=False)
    os.utime(root, (date, date))


# --- the wheel ---------------------------------------------------------------

def needed_libraries(binary):
    """(soname, resolved path) of every library `binary` loads, by ldd."""
    found = []
    for line in run(["ldd", binary]).splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(\S+)\s+\(0x", line)
        if m:
            found.append((m.group(1), m.group(2)))
        elif "not found" in line:
            fail("%s: %s" % (binary, line.strip()))
    return found


def vendor_libraries(binaries, lib_dir):
    """Copies into lib_dir the libraries the binaries load that are not
    SYSTEM_LIBRARIES, each with RUNPATH $ORIGIN; returns their sonames."""
    vendored = []
    for binary in binaries:
        for soname, path in needed_libraries(binary):
            if soname in SYSTEM_LIBRARIES or soname in vendored:
                continue
            dst = os.path.join(lib_dir, soname)
            install_file(path, dst, 0o755)
            run(["patchelf", "--set-rpath", "$ORIGIN", dst])
            vendored.append(soname)
    return sorted(vendored)


def glibc_floor(files):
    """The newest GLIBC_2.N symbol version the files need: the N of the
    manylinux_2_N tag."""
    newest = 17
    for path in files:
        for m in re.finditer(r"GLIBC_2\.([0-9]+)", run(["objdump", "-T", path])):
            newest = max(newest, int(m.group(1)))
    return newest


def wheel_tree(version, pinshim, library, source, tree):
    pkg = os.path.join(tree, "pinshim")
    for name in ("__init__.py", "__main__.py"):
        with open(os.path.join(source, "packaging", "python", "pinshim", name)) as f:
            text = f.read().replace("@VERSION@", version)
        os.makedirs(pkg, exist_ok=True)
        with open(os.path.join(pkg, name), "w") as f:
            f.write(text)
    exe = os.path.join(pkg, "bin", "pinshim")
    lib = os.path.join(pkg, "lib", "libpinshim.so")
    install_file(pinshim, exe, 0o755)
    install_file(library, lib, 0o755)
    for name, src in fleet_files(source):
        install_file(src, os.path.join(pkg, "lib", "pinshim-fleet", name), 0o644)
    vendored = vendor_libraries([pinshim, library], os.path.dirname(lib))
    run(["patchelf", "--set-rpath", "$ORIGIN/../lib", exe])
    run(["patchelf", "--set-rpath", "$ORIGIN", lib])
    elves = [exe, lib] + [os.path.join(pkg, "lib", v) for v in vendored]
    return vendored, glibc_floor(elves)


def wheel_metadata(version, vendored, source):
    with open(os.path.join(source, "docs", "install.md")) as f:
        long_description = f.read()
    return ("Metadata-Version: 2.1\nName: pinshim\nVersion: %s\nSummary: %s\n"
            "License: Apache-2.0\nRequires-Python: >=3.7\n"
            "Classifier: Operating System :: POSIX :: Linux\n"
            "Classifier: License :: OSI Approved :: Apache Software License\n"
            "Description-Content-Type: text/markdown\n\n"
            "Bundled shared libraries: %s.\n\n%s" % (version, SUMMARY, ", ".join(vendored),
                                                    long_description))


def record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [arcname, "sha256=" + digest, str(len(data))]


def build_wheel(version, pinshim, library, source, out, date):
    tree = tempfile.mkdtemp(prefix="pinshim-wheel.")
    try:
        vendored, glibc = wheel_tree(version, pinshim, library, source, tree)
        tag = "py3-none-manylinux_2_%d_x86_64" % glibc
        dist_info = "pinshim-%s.dist-info" % version
        files = []
        for dirpath, _, names in os.walk(tree):
            for name in names:
                path = os.path.join(dirpath, name)
                files.append((os.path.relpath(path, tree), path))
        meta = {
            "METADATA": wheel_metadata(version, vendored, source),
            "WHEEL": "Wheel-Version: 1.0\nGenerator: pinshim make_packages.py\n"
                     "Root-Is-Purelib: false\nTag: %s\n" % tag,
            "entry_points.txt": "[console_scripts]\npinshim = pinshim.__main__:main\n",
            "LICENSE": open(os.path.join(source, "LICENSE")).read(),
        }
        path = os.path.join(out, "pinshim-%s-%s.whl" % (version, tag))
        write_wheel(path, sorted(files), meta, dist_info, date)
        return path
    finally:
        shutil.rmtree(tree)


def write_wheel(path, files, meta, dist_info, date):
    stamp = time.gmtime(max(date, 315532800))[:6]  # zip dates start in 1980
    records = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        def add(arcname, data, mode):
            info = zipfile.ZipInfo(arcname, stamp)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            records.append(record_line(arcname, data))
        for arcname, src in files:
            with open(src, "rb") as f:
                add(arcname, f.read(), os.stat(src).st_mode & 0o777)
        for name, text in sorted(meta.items()):
            add(dist_info + "/" + name, text.encode(), 0o644)
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerows(records + [[dist_info + "/RECORD", "", ""]])
        info = zipfile.ZipInfo(dist_info + "/RECORD", stamp)
        info.external_attr = 0o100644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, buf.getvalue())


# --- the release archive -----------------------------------------------------

def tar_tree(path, top, entries, date):
    """Writes a .tar.gz of `entries` ((name under top, source file, mode))."""
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=date) as g:
            with tarfile.open(fileobj=g, mode="w", format=tarfile.PAX_FORMAT) as t:
                dirs = set()
                for name, _, _ in entries:
                    parts = name.split("/")[:-1]
                    for i in range(1, len(parts) + 1):
                        dirs.add("/".join(parts[:i]))
                for d in sorted(dirs | {""}):
                    info = tarfile.TarInfo((top + "/" + d).rstrip("/"))
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, date
                    t.addfile(info)
                for name, src, mode in sorted(entries):
                    info = tarfile.TarInfo(top + "/" + name)
                    info.size, info.mode, info.mtime = os.path.getsize(src), mode, date
                    with open(src, "rb") as f:
                        t.addfile(info, f)


def build_archives(version, stripped, debug, source, out, date):
    top = "pinshim-%s-linux-x86_64" % version
    pinshim, library = stripped
    entries = [
        ("bin/pinshim", pinshim, 0o755),
        ("lib/libpinshim.so", library, 0o644),
        ("share/man/man1/pinshim.1", os.path.join(source, "packaging", "pinshim.1"), 0o644),
        ("share/doc/pinshim/LICENSE", os.path.join(source, "LICENSE"), 0o644),
        ("share/doc/pinshim/CHANGELOG.md", os.path.join(source, "CHANGELOG.md"), 0o644),
        ("share/doc/pinshim/install.md", os.path.join(source, "docs", "install.md"), 0o644),
    ] + [("lib/pinshim-fleet/" + name, src, 0o644) for name, src in fleet_files(source)]
    release = os.path.join(out, top + ".tar.gz")
    tar_tree(release, top, entries, date)
    # gdb finds a .gnu_debuglink file in a .debug folder beside the binary:
    # unpacked over the release, these are found with no setting.
    debug_entries = [
        ("bin/.debug/pinshim.debug", debug[0], 0o644),
        ("lib/.debug/libpinshim.so.debug", debug[1], 0o644),
    ]
    symbols = os.path.join(out, top + "-debug.tar.gz")
    tar_tree(symbols, top, debug_entries, date)
    return release, symbols


def write_sums(out, paths):
    with open(os.path.join(out, "SHA256SUMS"), "w") as f:
        for p in sorted(paths):
            with open(p, "rb") as g:
                f.write("%s  %s\n" % (hashlib.sha256(g.read()).hexdigest(), os.path.basename(p)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pinshim", required=True, help="the built pinshim binary")
    parser.add_argument("--library", required=True, help="the built libpinshim.so")
    parser.add_argument("--source", required=True, help="the source tree's root")
    parser.add_argument("--out", required=True, help="where the packages go")
    args = parser.parse_args()
    version = read_version(args.source)
    date = file_date()
    os.makedirs(args.out, exist_ok=True)
    stage = tempfile.mkdtemp(prefix="pinshim-stage.")
    try:
        pinshim, pinshim_debug = split_debug(args.pinshim, stage, "pinshim")
        library, library_debug = split_debug(args.library, stage, "libpinshim.so")
        built = [
            build_deb(version, pinshim, library, args.source, args.out, date),
            build_wheel(version, pinshim, library, args.source, args.out, date),
        ]
        built += build_archives(version, (pinshim, library), (pinshim_debug, library_debug),
                                args.source, args.out, date)
    finally:
        shutil.rmtree(stage)
    write_sums(args.out, built)
    for path in built:
        print("%-60s %8.1f MiB" % (path, os.path.getsize(path) / 1048576.0))


if __name__ == "__main__":
    main()
