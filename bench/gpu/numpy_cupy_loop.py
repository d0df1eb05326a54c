"""A reused 64 MiB NumPy array copied to the GPU and back through CuPy, as an
unmodified CuPy program would; prints the loop time and a checksum."""
import sys
import time

import cupy as cp
import numpy as np

iters = int(sys.argv[1]) if len(sys.argv) > 1 else 30
a = (np.arange(64 << 20, dtype=np.uint32) % 251).astype(np.uint8)  # 64 MiB, pageable
back = np.empty_like(a)
d = cp.empty(a.shape, dtype=a.dtype)
for _ in range(3):
    d.set(a)
    d.get(out=back)
cp.cuda.runtime.deviceSynchronize()
t0 = time.perf_counter()
for i in range(iters):
    d.set(a)
    d.get(out=back)
cp.cuda.runtime.deviceSynchronize()
dt = time.perf_counter() - t0
print(f"numpy_cupy_loop iters={iters} seconds={dt:.6f} GBps={2 * a.nbytes * iters / dt / 1e9:.3f} "
      f"checksum={int(back[::4096].astype(np.uint64).sum())}")
