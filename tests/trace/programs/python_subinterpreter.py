"""Copies from a subinterpreter, through ctypes on the CUDA driver: from a
thread the subinterpreter started (the thread's own Python state belongs to
it) and from the main thread with the GIL held (ctypes.PyDLL). The report
labels those stacks "subinterpreter". Usage: python_subinterpreter.py; prints
"python_subinterpreter: ok"."""
import ctypes
import sys

try:
    import _xxsubinterpreters as interpreters  # 3.10 to 3.12
except ImportError:
    import _interpreters as interpreters  # 3.13

cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]


def check(result, what):
    if result != 0:
        sys.exit("python_subinterpreter: %s failed with %d" % (what, result))


SUB_CODE = '''
import ctypes, sys, threading
u64 = ctypes.c_uint64
CTX, DEV = %d, %d
errors = []


def copy_in_sub_thread():
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuMemcpyHtoD_v2.argtypes = [u64, ctypes.c_void_p, ctypes.c_size_t]
    if lib.cuCtxSetCurrent(ctypes.c_void_p(CTX)) != 0:
        errors.append("cuCtxSetCurrent")
        return
    buf = ctypes.create_string_buffer(2 << 20)
    for _ in range(20):
        if lib.cuMemcpyHtoD_v2(DEV, buf, 2 << 20) != 0:
            errors.append("cuMemcpyHtoD")
            return


def copy_in_sub_with_gil():
    lib = ctypes.PyDLL("libcuda.so.1")
    lib.cuMemcpyHtoD_v2.argtypes = [u64, ctypes.c_void_p, ctypes.c_size_t]
    buf = ctypes.create_string_buffer(2 << 20)
    for _ in range(20):
        if lib.cuMemcpyHtoD_v2(DEV, buf, 2 << 20) != 0:
            errors.append("cuMemcpyHtoD")
            return


t = threading.Thread(target=copy_in_sub_thread)
t.start()
t.join()
copy_in_sub_with_gil()
if errors:
    raise RuntimeError(errors[0])
'''


def main():
    check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    dev = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(dev), 2 << 20), "cuMemAlloc")
    # Legacy configuration: ctypes and threads are allowed in it.
    if sys.version_info >= (3, 13):
        sub = interpreters.create("legacy")
    else:
        sub = interpreters.create(isolated=False)
    failed = interpreters.run_string(sub, SUB_CODE % (ctx.value, dev.value))  # ENTERS-SUBINTERPRETER
    interpreters.destroy(sub)
    if failed:
        sys.exit("python_subinterpreter: %s" % (failed,))
    print("python_subinterpreter: ok")


main()
