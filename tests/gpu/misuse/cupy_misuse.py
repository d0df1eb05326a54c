"""CuPy misuse pinshim's report must find on a real GPU, each at the marked
line of this file: a NumPy array (pageable) copied to the device again and
again with "asynchronous" copies, which run synchronously. cupy.asarray of
a NumPy array is no such misuse: CuPy copies the array into its own pinned
pool first and uploads from there (measured on the H200: its 20 uploads
arrive as 320 MiB from pinned memory), so no pageable finding belongs at
its line."""
import cupy as cp
import numpy as np

host = np.ones(16 << 20, dtype=np.uint8)  # pageable
total = 0
for step in range(20):
    dev = cp.asarray(host)  # NOFINDING(pageable-hot)
    total += int(dev[step])

stream = cp.cuda.Stream(non_blocking=True)
target = cp.empty(16 << 20, dtype=cp.uint8)
for step in range(5):
    target.set(host, stream=stream)  # MISUSE(async-pageable) MISUSE(pageable-hot)
stream.synchronize()
total += int(target[7])
print("cupy_misuse:", total)
