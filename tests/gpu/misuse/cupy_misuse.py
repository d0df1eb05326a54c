"""CuPy misuse pinshim's report must find on a real GPU, each at the marked
line of this file: NumPy arrays (pageable) copied to the device again and
again, and "asynchronous" copies from them, which run synchronously."""
import cupy as cp
import numpy as np

host = np.ones(16 << 20, dtype=np.uint8)  # pageable
total = 0
for step in range(20):
    dev = cp.asarray(host)  # MISUSE(pageable-hot)
    total += int(dev[step])

stream = cp.cuda.Stream(non_blocking=True)
target = cp.empty(16 << 20, dtype=cp.uint8)
for step in range(5):
    target.set(host, stream=stream)  # MISUSE(async-pageable)
stream.synchronize()
total += int(target[7])
print("cupy_misuse:", total)
