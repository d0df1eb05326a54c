"""The Python cells of bench/gpu/matrix.sh: PyTorch training fed by a
DataLoader, and NumPy arrays moved through PyTorch or CuPy, as users' scripts
do them. One process per variant runs every round, in lockstep with the other
variants' processes (matrix.sh hands out the turns), so rounds interleave
without paying the imports and the CUDA start-up each time.

Usage: py_matrix.py ROUNDS GO_FIFO DONE_FIFO CELL...
  dataloader:BATCH:WORKERS:MODE   a TensorDataset of 3072 float images of
      3x96x96 (110.6 KB each: a batch of 5, 32 or 112 is about 0.5, 3.4 or
      12 MiB), a small CNN trained for a warm-up and then about 1536 images;
      images_per_s, the loss summed over the timed steps, the medians of
      each step's parts (fetch_us, upload_us, train_us: host time) and
      the training thread's minor page faults in a fetch (fetch_flt). MODE: pin
      (pin_memory, x.cuda(non_blocking=True)); nopin (no pin_memory,
      x.cuda(), which waits for the stream); nopinnb (no pin_memory,
      x.cuda(non_blocking=True): the same loop as pin's but for the flag);
      nocopy (no pin_memory, the batches never copied: the model trains on
      one batch uploaded before the loop): how fast the loop could go with
      copies free; syncnocopy (nocopy, waiting for the stream where nopin's
      x.cuda() does): how fast nopin's loop could go with copies free
  numpy:torch|cupy:MIB:fresh|reuse     a new NumPy array per step (fresh) or one
      rewritten in place, uploaded and downloaded; h2d_gbps and d2h_gbps
      are medians over the steps
Before each round the process reads one line from GO_FIFO; after it, it
writes "done" to DONE_FIFO. Round 0 is a warm-up and prints nothing. Lines:
  round=R cell=NAME METRIC=VALUE ... checksum=C"""
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

IMAGES = 3072
# Images timed per DataLoader cell and round (PY_MATRIX_TIMED_IMAGES).
TIMED_IMAGES = int(os.environ.get("PY_MATRIX_TIMED_IMAGES", "1536"))


def minor_faults():
    """The calling thread's minor page faults so far."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def dataloader_cell(batch, workers, mode, data, labels):
    pin, copy = mode == "pin", mode in ("pin", "nopin", "nopinnb")
    non_blocking = mode in ("pin", "nopinnb")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                          nn.Flatten(), nn.Linear(256, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(TensorDataset(data, labels), batch_size=batch, num_workers=workers,
                        pin_memory=pin, shuffle=True, drop_last=True,
                        generator=torch.Generator().manual_seed(1),
                        persistent_workers=workers > 0)
    warm, timed = 4, max(16, TIMED_IMAGES // batch)
    losses, step, t0 = [], 0, None
    fetch, upload, train = [], [], []  # each timed step's phases, host time
    fetch_flt = []  # minor page faults of the training thread in each fetch
    fixed_x = data[:batch].cuda()
    fixed_y = labels[:batch].cuda()
    while step < warm + timed:
        batches = iter(loader)
        while step < warm + timed:
            a = time.perf_counter()
            fa = minor_faults()
            try:
                x, y = next(batches)
            except StopIteration:
                break
            if step == warm:
                torch.cuda.synchronize()
                t0 = a = time.perf_counter()
                fa = minor_faults()
            b = time.perf_counter()
            fb = minor_faults()
            if copy:
                x = x.cuda(non_blocking=non_blocking)
                y = y.cuda(non_blocking=non_blocking)
            else:
                x, y = fixed_x, fixed_y
                if mode == "syncnocopy":
                    torch.cuda.current_stream().synchronize()
            c = time.perf_counter()
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step >= warm:
                losses.append(loss.detach())
                fetch.append(b - a)
                fetch_flt.append(fb - fa)
                upload.append(c - b)
                train.append(time.perf_counter() - c)
            step += 1
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    del loader, batches  # its workers end here
    checksum = float(torch.stack(losses).sum())
    us = lambda v: 1e6 * statistics.median(v)
    return (f"images_per_s={timed * batch / dt:.1f} fetch_us={us(fetch):.0f} "
            f"upload_us={us(upload):.0f} train_us={us(train):.0f} "
            f"fetch_flt={statistics.median(fetch_flt):.0f} checksum={checksum:.5f}")


def numpy_cell(framework, mib, fresh):
    n = mib << 20
    if framework == "torch":
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        sync = torch.cuda.synchronize
        upload = lambda a: dev.copy_(torch.from_numpy(a))
        download = lambda: dev.cpu().numpy()
    else:
        import cupy as cp
        dev = cp.empty(n, dtype=cp.uint8)
        sync = cp.cuda.runtime.deviceSynchronize
        upload = lambda a: dev.set(a)
        download = lambda: dev.get()
    steps = 24 if mib <= 4 else 8
    up, down, checksum = [], [], 0
    a = np.empty(n, dtype=np.uint8)
    for i in range(steps + 2):
        if fresh:
            a = np.full(n, i % 251, dtype=np.uint8)  # a new, just written array
        else:
            a.fill(i % 251)
        sync()
        t0 = time.perf_counter()
        upload(a)
        sync()
        t1 = time.perf_counter()
        back = download()
        sync()
        t2 = time.perf_counter()
        if i >= 2:
            up.append(t1 - t0)
            down.append(t2 - t1)
        checksum = (checksum * 31 + int(back[n // 2]) + int(back[-1])) % (1 << 64)
    return (f"h2d_gbps={n / statistics.median(up) / 1e9:.3f} "
            f"d2h_gbps={n / statistics.median(down) / 1e9:.3f} checksum={checksum:016x}")


def run_cell(spec, data, labels):
    f = spec.split(":")
    if f[0] == "dataloader":
        return dataloader_cell(int(f[1]), int(f[2]), f[3], data, labels)
    if f[0] == "numpy":
        try:
            return numpy_cell(f[1], int(f[2]), f[3] == "fresh")
        except ImportError as e:
            return f"skipped={type(e).__name__}"
    raise SystemExit(f"py_matrix: bad cell '{spec}'")


def main():
    rounds, go_path, done_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    cells = sys.argv[4:]
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    g = torch.Generator().manual_seed(0)
    data = torch.rand(IMAGES, 3, 96, 96, generator=g)
    labels = torch.randint(0, 10, (IMAGES,), generator=g)
    with open(go_path) as go, open(done_path, "w") as done:
        for r in range(rounds + 1):
            if not go.readline():
                return
            for spec in cells:
                line = run_cell(spec, data, labels)
                if r > 0:
                    print(f"round={r} cell={spec} {line}", flush=True)
            done.write("done\n")
            done.flush()


if __name__ == "__main__":
    main()
