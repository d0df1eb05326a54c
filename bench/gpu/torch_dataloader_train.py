"""A PyTorch training loop fed by a DataLoader, for timing what pinshim's
observe mode costs with and without Python frames (python_frames_overhead.sh).
Synthetic images (uint8, 3x224x224) from two worker processes, pinned by
the DataLoader (pin_memory=True) and copied with non_blocking=True; a small
convolutional network, SGD. Prints the loop's seconds, images per second
and a checksum of the final weights (identical with and without pinshim).
  python3 torch_dataloader_train.py [STEPS] [BATCH]"""
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 120
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64


class Images(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        image = torch.randint(0, 256, (3, 224, 224), dtype=torch.uint8, generator=g)
        return image, i % 10


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 5, stride=2), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(64 * 16, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Images(), batch_size=batch, num_workers=2,
                                         pin_memory=True, shuffle=False)
    it = iter(loader)
    for _ in range(5):  # warm-up: workers started, kernels chosen
        images, labels = next(it)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        images, labels = next(it)
        images = images.to("cuda", non_blocking=True).float().div_(255)
        labels = labels.to("cuda", non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    checksum = sum(float(p.double().sum()) for p in model.parameters())
    print("torch_dataloader_train steps=%d batch=%d seconds=%.6f images_per_s=%.1f checksum=%.6f"
          % (steps, batch, dt, steps * batch / dt, checksum))


if __name__ == "__main__":
    main()
