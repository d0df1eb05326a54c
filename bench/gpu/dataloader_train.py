"""A PyTorch training loop fed by a DataLoader (4 worker processes making
synthetic 3x224x224 images), with pin_memory on or off. Prints images per
second over the timed batches and a checksum of the losses (identical with
and without pinshim).
Usage: dataloader_train.py pin|nopin BATCHES"""
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

pin = sys.argv[1] == "pin"
batches = int(sys.argv[2])
BATCH = 128


class Images(Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, 224, 224, generator=g), i % 10


torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
model = nn.Sequential(nn.Conv2d(3, 16, 7, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(8),
                      nn.Flatten(), nn.Linear(16 * 64, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Images(), batch_size=BATCH, num_workers=4, pin_memory=pin, shuffle=False,
                    persistent_workers=True, prefetch_factor=4)
losses = []
t0 = None
for step, (x, y) in enumerate(loader):
    if step == 5:  # warm-up: workers started, kernels chosen
        torch.cuda.synchronize()
        t0 = time.perf_counter()
    x = x.cuda(non_blocking=pin)
    y = y.cuda(non_blocking=pin)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.detach())
    if step + 1 == batches + 5:
        break
torch.cuda.synchronize()
dt = time.perf_counter() - t0
checksum = float(torch.stack(losses).sum())
print(f"dataloader_train pin={int(pin)} batches={batches} images_per_s={batches * BATCH / dt:.1f} "
      f"loss_checksum={checksum:.6f}")
