"""Fresh NumPy arrays (a new one per step, just computed on the CPU) copied to
the GPU and back, through PyTorch or CuPy, as an unmodified program moves its
batches. Prints the median copy time per step and a checksum.
Usage: fresh_arrays.py torch|cupy STEPS [MIB]"""
import statistics
import sys
import time

import numpy as np

framework = sys.argv[1]
steps = int(sys.argv[2])
mib = int(sys.argv[3]) if len(sys.argv) > 3 else 64
n = mib << 20
times = []
checksum = 0
if framework == "torch":
    import torch
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    for i in range(steps + 2):
        a = np.full(n, i % 251, dtype=np.uint8)  # a new, just written array
        t = torch.from_numpy(a)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dev.copy_(t)
        back = dev.cpu()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - t0)
        checksum += int(back[n // 2])
else:
    import cupy as cp
    dev = cp.empty(n, dtype=cp.uint8)
    for i in range(steps + 2):
        a = np.full(n, i % 251, dtype=np.uint8)
        cp.cuda.runtime.deviceSynchronize()
        t0 = time.perf_counter()
        dev.set(a)
        back = dev.get()
        cp.cuda.runtime.deviceSynchronize()
        if i >= 2:
            times.append(time.perf_counter() - t0)
        checksum += int(back[n // 2])
med = statistics.median(times)
print(f"fresh_arrays framework={framework} mib={mib} steps={steps} seconds_per_step={med:.6f} "
      f"GBps={2 * n / med / 1e9:.3f} checksum={checksum}")
