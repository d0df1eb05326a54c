"""NumPy <-> CuPy round trips, as a user's script makes them, for the GPU
tier's trace check: fresh and reused arrays to the GPU and back with
cupy.asarray / cupy.asnumpy / ndarray.set / ndarray.get, pinned memory from
cupyx.empty_pinned with non_blocking-style async copies on a stream, each
waited for. Prints "copies N" (at least the host<->device copies it makes)
and exits 0 when every result is right. CuPy's import runs ldconfig and gcc
through subprocess (vfork) before CUDA is touched: the trace must survive
that."""
import sys

import cupy as cp
import cupyx
import numpy as np

copies = 0
ok = True
for i in range(8):
    a = np.random.default_rng(i).random(1 << 18).astype(np.float32)  # 1 MiB, fresh
    d = cp.asarray(a)
    back = cp.asnumpy(d * 2)
    copies += 2
    ok = ok and np.allclose(back, a * 2)
reused = np.arange(1 << 20, dtype=np.float32)
d = cp.empty_like(reused)
out = np.empty_like(reused)
for _ in range(4):
    d.set(reused)
    d.get(out=out)
    copies += 2
    ok = ok and np.array_equal(out, reused)
stream = cp.cuda.Stream(non_blocking=True)
pinned = cupyx.empty_pinned((1 << 20,), dtype=np.float32)
pinned[:] = 3.0
with stream:
    d.set(pinned, stream=stream)
    d *= 2
    d.get(out=pinned, stream=stream)
    copies += 2
stream.synchronize()
ok = ok and bool((pinned == 6.0).all())
print("copies", copies)
sys.exit(0 if ok else 1)
