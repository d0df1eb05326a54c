"""Finds the CUDA toolkit ($CUDA_HOME, else /usr/local/cuda) for the offline build.

pinshim itself uses only the headers: it reaches the driver at run time through
dlopen, so nothing of pinshim links against libcuda or the CUDA runtime. The
headers are also exported as files (the simulated driver reads its table of
entry points from the toolkit's typedef headers). For tests that build CUDA
runtime programs: `nvcc`, a script that runs the toolkit's nvcc (nvcc finds
its own files from the path it is started by, so a symlink would not do), and
`lib64/libcudart.so`, whose real folder holds the toolkit's shared runtime.
"""

def _cuda_configure_impl(ctx):
    home = ctx.os.environ.get("CUDA_HOME", "") or "/usr/local/cuda"
    include = ctx.path(home + "/include")
    if not include.get_child("cuda.h").exists:
        fail("pinshim: no CUDA toolkit at %s (set CUDA_HOME to the toolkit's folder)" % home)
    ctx.symlink(include, "include")
    ctx.symlink(home + "/lib64", "lib64")
    ctx.file("nvcc", "#!/bin/sh\nexec '%s/bin/nvcc' \"$@\"\n" % home, executable = True)
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

exports_files(glob(["include/*.h"]) + ["nvcc", "lib64/libcudart.so"])

cc_library(
    name = "headers",
    hdrs = glob(["include/*.h", "include/crt/*.h", "include/crt/*.hpp"]),
    includes = ["include"],
)
""")

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_HOME"],
    local = True,
)
