"""One binary per test program (programs/<name>.cc) and harness backend.

The same sources link with either backend (harness/cuda_harness.h):
"programs/<name>" with the one that records directly, and
"programs/<name>_driver" with the one that calls the CUDA driver, to run
under LD_PRELOAD=libpinshim.so once the hooks record."""

def trace_programs(names, harness, suffix = "", tags = []):
    for name in names:
        native.cc_binary(
            name = "programs/" + name + suffix,
            srcs = ["programs/%s.cc" % name],
            # Frame pointers keep the stacks the tests check exact.
            copts = ["-fno-omit-frame-pointer"],
            tags = tags,
            deps = [harness],
        )
