"""Finds the CUDA toolkit ($CUDA_HOME, else /usr/local/cuda) for the offline build.

Only the headers are used at build time: pinshim reaches the driver at run time
through dlopen, so nothing links against libcuda or the CUDA runtime here.
"""

def _cuda_configure_impl(ctx):
    home = ctx.os.environ.get("CUDA_HOME", "") or "/usr/local/cuda"
    include = ctx.path(home + "/include")
    if not include.get_child("cuda.h").exists:
        fail("pinshim: no CUDA toolkit at %s (set CUDA_HOME to the toolkit's folder)" % home)
    ctx.symlink(include, "include")
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

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
