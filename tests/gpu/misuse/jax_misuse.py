"""JAX misuse pinshim's report must find on a real GPU, at the marked line
of this file: a 64 MiB device array fetched into new NumPy (pageable) arrays
again and again. Where XLA makes the copy on a thread of its own, the
calling thread's Python frames are not the copy's: check_findings.py
--worker-thread-ok then accepts the finding at XLA's native site, labelled
as a thread without a Python state, and prints it as an expected limit."""
import jax
import jax.numpy as jnp
import numpy as np

x = jnp.ones((4096, 4096), dtype=jnp.float32)  # 64 MiB on the device
total = 0.0
for step in range(12):
    y = x + step
    h = np.asarray(y)  # MISUSE(pageable-hot)
    total += float(h[0, 0])
print("jax_misuse:", total)
