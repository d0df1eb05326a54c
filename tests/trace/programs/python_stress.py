"""Frames that come and go while pinshim reads them: threads that start and
end, generators, coroutines, recursion, exceptions, code compiled on the
fly and freed again, each making copies through ctypes (the GIL released)
and large allocations (tracked: recorded with the thread's frames) from
inside those frames, while other threads churn their own frames. The
program must finish with the same result as without pinshim; prints
"python_stress: ok <checksum>"."""
import asyncio
import ctypes
import sys
import threading

cuda = ctypes.CDLL("libcuda.so.1")
u64 = ctypes.c_uint64
cuda.cuMemcpyHtoD_v2.argtypes = [u64, ctypes.c_void_p, ctypes.c_size_t]
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t]
cuda.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
errors = []


def check(r, what):
    if r != 0:
        raise RuntimeError("%s failed with %d" % (what, r))


def setup():
    check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "retain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    dev = u64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(dev), 1 << 20), "cuMemAlloc")
    return ctx, dev.value


def copy(dev, buf):
    check(cuda.cuMemcpyHtoD_v2(dev, buf, len(buf)), "cuMemcpyHtoD")


def recurse(dev, buf, n):
    if n == 0:
        copy(dev, buf)
        return bytearray(256 << 10)  # a tracked allocation, deep down
    return recurse(dev, buf, n - 1)


def generator(dev, buf):
    for i in range(3):
        copy(dev, buf)
        yield bytearray(128 << 10)


async def coroutine(dev, buf):
    await asyncio.sleep(0)
    copy(dev, buf)
    return len(bytearray(96 << 10))


def raising(dev, buf):
    try:
        copy(dev, buf)
        raise ValueError("on purpose")
    except ValueError:
        copy(dev, buf)
        return 1


def compiled(dev, buf, i):
    # A new code object each time, freed after: addresses get reused.
    namespace = {"copy": copy, "dev": dev, "buf": buf}
    exec(compile("def f%d():\n    copy(dev, buf)\n    return %d\n" % (i, i), "<gen%d>" % i, "exec"),
         namespace)
    return namespace["f%d" % i]()


def worker(ctx, dev, seed, out):
    try:
        check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        buf = ctypes.create_string_buffer(64 << 10)
        total = 0
        for r in range(ROUNDS):
            total += len(recurse(dev, buf, (seed + r) % 40))
            total += sum(len(b) for b in generator(dev, buf))
            total += asyncio.run(coroutine(dev, buf))
            total += raising(dev, buf)
            total += compiled(dev, buf, seed * 1000 + r)
            total += sum(len(bytearray(80 << 10)) for _ in range(2))
        out[seed] = total
    except Exception as e:  # reported by main()
        errors.append(repr(e))


def churn(stop):
    # Frames pushed and popped as fast as the GIL allows, no copies.
    def f(n):
        return n if n < 2 else f(n - 1) + 1
    while not stop.is_set():
        f(30)
        [x * 2 for x in range(50)]


def main():
    ctx, dev = setup()
    stop = threading.Event()
    churners = [threading.Thread(target=churn, args=(stop,)) for _ in range(2)]
    for t in churners:
        t.start()
    out = {}
    for wave in range(3):  # threads that start and end while others run
        threads = [threading.Thread(target=worker, args=(ctx.value, dev, wave * 10 + i, out))
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    stop.set()
    for t in churners:
        t.join()
    if errors:
        sys.exit("python_stress: " + errors[0])
    print("python_stress: ok %d" % sum(out.values()))


main()
