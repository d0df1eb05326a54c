"""JAX on a real GPU. First what looks like a misuse and is not: a 64 MiB
device array fetched into new NumPy arrays again and again. XLA downloads
into pinned buffers of its own and copies into the NumPy array on the CPU
(measured on the H200 with JAX's CUDA 12 plugin: all 768 MiB of downloads
came from pinned memory, 66 MiB of it pinned at the peak), so no pageable
finding belongs at the fetching line: the report must not make one there.
Then a 64 MiB NumPy array uploaded again and again with jax.device_put:
XLA stages uploads through the same pinned buffers (measured on the H200:
all 768 MiB of the 12 uploads came from pinned memory), so no pageable
finding belongs there either. (No JAX program makes a pageable copy that
pinshim could report: the checks here are that it reports none.)"""
import jax
import jax.numpy as jnp
import numpy as np

x = jnp.ones((4096, 4096), dtype=jnp.float32)  # 64 MiB on the device
total = 0.0
for step in range(12):
    y = x + step
    h = np.asarray(y)  # NOFINDING(pageable-hot)
    total += float(h[0, 0])
host = np.ones((4096, 4096), dtype=np.float32)  # 64 MiB, pageable
for step in range(12):
    d = jax.device_put(host)  # NOFINDING(pageable-hot)
    total += float(d[0, 0])
print("jax_misuse:", total)
