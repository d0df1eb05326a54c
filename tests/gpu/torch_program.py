"""PyTorch under pinshim, for the GPU tier.

Moves tensors between the CPU and the GPU in the ways training code does:
pageable tensors to the GPU and back, pinned tensors (pin_memory(),
pin_memory=True), non_blocking copies both ways, and one 64 MiB tensor reused
for several copies. Prints a checksum of every tensor that came back to the
CPU and, last, an "expect:" line (the vocabulary of tests/gpu/call_ledger.h).

What the line claims, and why it is certain:
  - h2d / d2h and their bytes: each .to() / .copy_() / .cpu() below moves one
    contiguous tensor of the same dtype between the CPU and the GPU, which
    PyTorch does with exactly one cudaMemcpyAsync. Nothing else in this
    program copies between host and device: checksums are computed on CPU
    tensors, GPU arithmetic only takes Python scalars (passed as kernel
    arguments), and no .item() or printing of GPU tensors happens.
  - host_pageable / host_program_pinned: the host side of each of those copies.
  - pinned_acquired / pinned_released: read from torch.cuda.host_memory_stats()
    (num_host_alloc counts cudaHostAlloc and cudaHostRegister calls,
    num_host_free cudaFreeHost and cudaHostUnregister calls), only if this
    PyTorch has them. Blocks the allocator still owns at exit may be released
    after the stats were read, so the release count is a range.
What it does not claim: device-to-device and host-to-host counts (PyTorch is
free to make internal device copies), failed calls, and pinned allocation
counts when host_memory_stats() is missing.
"""

import hashlib
import sys

import torch

KIB = 1 << 10
MIB = 1 << 20
FLOAT_BYTES = 4


class Ledger:
    def __init__(self):
        self.h2d = self.d2h = self.h2d_bytes = self.d2h_bytes = 0
        self.host_pageable = self.host_pinned = 0

    def copy(self, direction, host_tensor, pinned):
        nbytes = host_tensor.numel() * host_tensor.element_size()
        if direction == "h2d":
            self.h2d += 1
            self.h2d_bytes += nbytes
        else:
            self.d2h += 1
            self.d2h_bytes += nbytes
        if pinned:
            self.host_pinned += 1
        else:
            self.host_pageable += 1


LEDGER = Ledger()


def make(nbytes, seed):
    """A deterministic float32 CPU tensor of nbytes bytes (pageable)."""
    i = torch.arange(nbytes // FLOAT_BYTES, dtype=torch.int64)
    return ((i * 2654435761 + seed) % 65521).to(torch.float32)


def checksum(label, t):
    assert t.device.type == "cpu"
    try:
        digest = hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]
    except (ImportError, RuntimeError):
        # Without numpy: an exact integer checksum computed on the CPU.
        words = t.contiguous().view(torch.int32).to(torch.int64)
        weights = torch.arange(words.numel(), dtype=torch.int64) % 1000003 + 1
        digest = "%016x" % (int((words * weights).sum()) & ((1 << 64) - 1))
    print("checksum %s bytes=%d %s" % (label, t.numel() * t.element_size(), digest))


def to_gpu(host, pinned, non_blocking=False):
    LEDGER.copy("h2d", host, pinned)
    return host.to("cuda", non_blocking=non_blocking)


def pageable_round_trips():
    for n in (4 * KIB, 1 * MIB, 16 * MIB):
        cpu = make(n, 11)
        g = to_gpu(cpu, pinned=False)
        g = g * 3 + 1
        back = g.cpu()
        LEDGER.copy("d2h", back, False)
        checksum("pageable/%d" % n, back)


def pinned_round_trips():
    for n in (64 * KIB, 4 * MIB):
        src = make(n, 21).pin_memory()
        g = to_gpu(src, pinned=True, non_blocking=True)
        g.mul_(3)
        # A non_blocking copy to the CPU lands in a new tensor, pinned by
        # PyTorch (asked, rather than assumed, since that is its choice).
        out = g.to("cpu", non_blocking=True)
        torch.cuda.synchronize()
        LEDGER.copy("d2h", out, out.is_pinned())
        checksum("pinned-to/%d" % n, out)

        g.add_(7)
        out2 = torch.empty(n // FLOAT_BYTES, dtype=torch.float32, pin_memory=True)
        out2.copy_(g, non_blocking=True)
        LEDGER.copy("d2h", out2, True)
        torch.cuda.synchronize()
        checksum("pinned-copy/%d" % n, out2)

        g.copy_(src, non_blocking=True)
        LEDGER.copy("h2d", src, True)
        g.sub_(5)
        back = g.cpu()
        LEDGER.copy("d2h", back, False)
        checksum("pinned-back/%d" % n, back)
        del src, out, out2


def reused_big_tensor():
    n = 64 * MIB
    dev = torch.empty(n // FLOAT_BYTES, dtype=torch.float32, device="cuda")
    src = make(n, 31)
    staging = torch.empty(n // FLOAT_BYTES, dtype=torch.float32, pin_memory=True)
    for step in range(3):
        src.add_(1)
        dev.copy_(src)
        LEDGER.copy("h2d", src, False)
        dev.mul_(2)
        staging.copy_(dev, non_blocking=True)
        LEDGER.copy("d2h", staging, True)
        torch.cuda.synchronize()
        checksum("reused-64MiB/step%d" % step, staging)
    staging.copy_(src)  # CPU to CPU: no CUDA copy
    dev.copy_(staging, non_blocking=True)
    LEDGER.copy("h2d", staging, True)
    dev.add_(1)
    back = dev.cpu()
    LEDGER.copy("d2h", back, False)
    checksum("reused-64MiB/pinned-in", back)
    del staging


def host_stats():
    for owner in (torch.cuda, getattr(torch.cuda, "memory", None)):
        fn = getattr(owner, "host_memory_stats", None)
        if fn is not None:
            return fn()
    return None


def empty_host_cache():
    accel = getattr(getattr(torch, "accelerator", None), "memory", None)
    fn = getattr(accel, "empty_host_cache", None)
    if fn is None:
        fn = getattr(torch._C, "_host_emptyCache", None)
    if fn is not None:
        fn()
    return fn is not None


def main():
    if not torch.cuda.is_available():
        print("FATAL torch.cuda.is_available() is False")
        return 3
    print("torch_program torch=%s cuda=%s" % (torch.__version__, torch.version.cuda))
    torch.cuda.init()
    pageable_round_trips()
    pinned_round_trips()
    reused_big_tensor()
    torch.cuda.synchronize()
    emptied = empty_host_cache()

    fields = [
        ("h2d", LEDGER.h2d),
        ("d2h", LEDGER.d2h),
        ("h2d_bytes", LEDGER.h2d_bytes),
        ("d2h_bytes", LEDGER.d2h_bytes),
        ("host_pageable", LEDGER.host_pageable),
        ("host_program_pinned", LEDGER.host_pinned),
    ]
    stats = host_stats()
    if stats is not None and "num_host_alloc" in stats and "num_host_free" in stats:
        owned = stats.get("allocations.current", stats.get("segment.current"))
        freed = int(stats["num_host_free"])
        fields.append(("pinned_acquired", int(stats["num_host_alloc"])))
        if owned is not None:
            owned = int(owned)
            fields.append(("pinned_released",
                           str(freed) if owned == 0 else "%d..%d" % (freed, freed + owned)))
        print("host allocator: emptied=%d owned_after=%s" % (emptied, owned))
    else:
        print("host allocator: no host_memory_stats; pinned counts not compared")
    print("expect: " + " ".join("%s=%s" % kv for kv in fields))
    print("torch_program done")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
