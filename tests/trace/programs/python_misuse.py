"""Misuse from Python, reaching the CUDA driver through ctypes (tests/fakecuda's
libcuda.so.1 in CI): the report must name each line marked MISUSE(<rule>) in this file
as the rule's site, and each ALLOC(<rule>) line as the allocation site in its
evidence. ctypes.CDLL releases the GIL around every foreign call, so most copies
here are recorded while this thread does not hold the GIL; with_gil_held
makes its copies through ctypes.PyDLL, which keeps it.

Besides the main thread: a Python thread copies from its own lines, and a
native thread the driver is called from (NATIVE_COPIER, a small library of
this test) has no Python state; its copies keep the native site and are
labelled as such. Prints "python_misuse: ok" at the end."""
import ctypes
import os
import sys
import threading

cuda = ctypes.CDLL("libcuda.so.1")
u64 = ctypes.c_uint64
for name in ("cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyHtoDAsync_v2",
             "cuMemFree_v2", "cuMemHostAlloc", "cuMemFreeHost", "cuStreamCreate",
             "cuStreamSynchronize", "cuStreamDestroy_v2"):
    getattr(cuda, name).restype = ctypes.c_int
cuda.cuMemcpyHtoD_v2.argtypes = [u64, ctypes.c_void_p, ctypes.c_size_t]
cuda.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, u64, ctypes.c_size_t]
cuda.cuMemcpyHtoDAsync_v2.argtypes = [u64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
cuda.cuMemFree_v2.argtypes = [u64]
cuda.cuMemFreeHost.argtypes = [ctypes.c_void_p]


def check(result, what):
    if result != 0:
        sys.exit("python_misuse: %s failed with %d" % (what, result))


def device_alloc(size):
    dev = u64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(dev), ctypes.c_size_t(size)), "cuMemAlloc")
    return dev.value


def upload(dev, host, size):
    check(cuda.cuMemcpyHtoD_v2(dev, host, size), "cuMemcpyHtoD")  # MISUSE(pageable-hot)


def train(dev, steps):
    batch = ctypes.create_string_buffer(4 << 20)  # ALLOC(pageable-hot)
    for step in range(steps):
        ctypes.memset(batch, step, 4 << 20)
        upload(dev, batch, 4 << 20)


def staging_per_batch(dev, batches):
    for _ in range(batches):
        host = ctypes.c_void_p()
        check(cuda.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(1 << 20), 0), "cuMemHostAlloc")  # MISUSE(pinned-churn)
        check(cuda.cuMemcpyHtoD_v2(dev, host, 1 << 20), "cuMemcpyHtoD")
        check(cuda.cuMemFreeHost(host), "cuMemFreeHost")


def async_from_pageable(dev):
    stream = ctypes.c_void_p()
    check(cuda.cuStreamCreate(ctypes.byref(stream), 0), "cuStreamCreate")
    staging = ctypes.create_string_buffer(1 << 20)
    for _ in range(3):
        check(cuda.cuMemcpyHtoDAsync_v2(dev, staging, 1 << 20, stream), "cuMemcpyHtoDAsync")  # MISUSE(async-pageable)
    check(cuda.cuStreamSynchronize(stream), "cuStreamSynchronize")
    check(cuda.cuStreamDestroy_v2(stream), "cuStreamDestroy")


def small_reads(dev):
    out = ctypes.create_string_buffer(4096)
    for _ in range(150):
        check(cuda.cuMemcpyDtoH_v2(out, dev, 4096), "cuMemcpyDtoH")  # MISUSE(small-copies) MISUSE(sync-copy-loop)


def with_gil_held(dev):
    # ctypes.PyDLL keeps the GIL across the call: frames are read the same way.
    held = ctypes.PyDLL("libcuda.so.1")
    held.cuMemcpyHtoD_v2.argtypes = [u64, ctypes.c_void_p, ctypes.c_size_t]
    block = ctypes.create_string_buffer(2 << 20)
    for _ in range(20):
        check(held.cuMemcpyHtoD_v2(dev, block, 2 << 20), "cuMemcpyHtoD")  # MISUSE(pageable-hot)


def worker(ctx, dev, errors):
    # A thread's SystemExit ends the thread only: failures go back to main().
    try:
        check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        frame = ctypes.create_string_buffer(2 << 20)
        for _ in range(30):
            check(cuda.cuMemcpyHtoD_v2(dev, frame, 2 << 20), "cuMemcpyHtoD")  # MISUSE(pageable-hot)
    except SystemExit as e:
        errors.append(str(e))


def main():
    check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    dev = device_alloc(4 << 20)
    train(dev, 40)
    staging_per_batch(dev, 12)
    async_from_pageable(dev)
    small_reads(dev)
    with_gil_held(dev)
    errors = []
    t = threading.Thread(target=worker, args=(ctx, dev, errors))
    t.start()
    t.join()
    if errors:
        sys.exit(errors[0])
    copier = os.environ.get("NATIVE_COPIER")
    if copier:
        lib = ctypes.CDLL(copier)
        lib.copy_from_native_thread.restype = ctypes.c_int
        lib.copy_from_native_thread.argtypes = [u64, ctypes.c_size_t, ctypes.c_int]
        check(lib.copy_from_native_thread(dev, 1 << 20, 20), "copy_from_native_thread")
    check(cuda.cuMemFree_v2(dev), "cuMemFree")
    print("python_misuse: ok")


main()
