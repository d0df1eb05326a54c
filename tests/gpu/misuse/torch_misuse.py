"""PyTorch misuse pinshim's report must find on a real GPU, each at the
marked line of this file (check_findings.py): the Python line that made the
copy, read from the calling thread's Python frames, with PyTorch's fix.
Prints a checksum so runs can be compared."""
import torch

x = torch.ones(16 << 20, dtype=torch.uint8)  # pageable
total = 0
for step in range(20):
    y = x.to("cuda", non_blocking=True)  # MISUSE(async-pageable)
    total += int(y[step].item())
torch.cuda.synchronize()


class Batches(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return torch.full((4 << 20,), i % 251, dtype=torch.uint8)


# A DataLoader without pin_memory: every batch is a new pageable tensor.
loader = torch.utils.data.DataLoader(Batches(), batch_size=2, num_workers=0)
for batch in loader:
    gpu = batch.to("cuda")  # MISUSE(pageable-hot)
    total += int(gpu.sum())

# Scalars read one by one: a small synchronous device-to-host copy each.
values = torch.arange(256, device="cuda", dtype=torch.float32)
for i in range(200):
    total += int(values[i].item())  # MISUSE(small-copies)
torch.cuda.synchronize()
print("torch_misuse:", total)
