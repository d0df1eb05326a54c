"""One binary per test program (programs/<name>.cc), linked with a harness
backend: today the one that records directly; tomorrow the driver backend,
run under LD_PRELOAD=libpinshim.so, without touching the programs."""

def trace_programs(names, harness):
    for name in names:
        native.cc_binary(
            name = "programs/" + name,
            srcs = ["programs/%s.cc" % name],
            # Frame pointers and no inlining of the misuse sites keep the
            # stacks the tests check exact.
            copts = ["-fno-omit-frame-pointer"],
            deps = [harness],
        )
