"""A reused 64 MiB pageable CPU tensor copied to the GPU and back, as an
unmodified PyTorch program would; prints the loop time and a checksum."""
import sys
import time

import torch

iters = int(sys.argv[1]) if len(sys.argv) > 1 else 50
x = torch.arange(64 << 20, dtype=torch.uint8)  # 64 MiB, pageable
back = torch.empty_like(x)
for _ in range(3):
    y = x.to("cuda")
    back.copy_(y)
torch.cuda.synchronize()
t0 = time.perf_counter()
for i in range(iters):
    y = x.to("cuda")
    back.copy_(y)
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(f"torch_copy_loop iters={iters} seconds={dt:.6f} GBps={2 * x.numel() * iters / dt / 1e9:.3f} "
      f"checksum={int(back[::4096].sum())}")
