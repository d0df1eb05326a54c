"""PyTorch misuse pinshim's report must find on a real GPU: non_blocking
copies from pageable CPU tensors, which the driver performs synchronously.
check_findings.py accepts the finding at this file and line (when the report
recovers Python frames) or at the native frame that called the driver."""
import torch

x = torch.ones(16 << 20, dtype=torch.uint8)  # pageable
total = 0
for step in range(20):
    y = x.to("cuda", non_blocking=True)  # MISUSE(async-pageable)
    total += int(y[step].item())
torch.cuda.synchronize()
print("torch_misuse:", total)
