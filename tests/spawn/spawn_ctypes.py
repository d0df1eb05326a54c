"""A Python program as CuPy is one: subprocess runs children (vfork on
Linux) before and after the CUDA driver is used, here through ctypes on
the driver that LD_LIBRARY_PATH finds. Prints "copies N"."""
import ctypes
import subprocess
import sys

subprocess.run(["true"], check=True)            # at import time, before CUDA
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev = ctypes.c_int()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
size = 1 << 20
d = ctypes.c_uint64()
assert cuda.cuMemAlloc_v2(ctypes.byref(d), size) == 0
buf = ctypes.create_string_buffer(size)
copies = 0
for _ in range(2):
    assert cuda.cuMemcpyHtoD_v2(d, buf, ctypes.c_size_t(size)) == 0
    copies += 1
subprocess.run(["true"], check=True)            # while CUDA is in use
subprocess.run([sys.executable, "-c", "pass"], check=True)
try:
    subprocess.run(["/nonexistent/program"])    # exec fails in the vfork child
except FileNotFoundError:
    pass
for _ in range(3):
    assert cuda.cuMemcpyHtoD_v2(d, buf, ctypes.c_size_t(size)) == 0
    copies += 1
print("copies", copies)
