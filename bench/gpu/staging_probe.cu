// How fast can pageable memory move through a ring of pinned chunks, copied
// by T worker threads while the DMA of the neighbouring chunk runs? Sweeps
// workers, chunk size, ring depth and the CPU copy routine, beside the
// driver's own pageable and pinned copies of the same sizes, so staged
// copies' defaults are chosen from figures of the machine they run on.
//
//   nvcc -O2 -Xcompiler -mavx2 -o staging_probe bench/gpu/staging_probe.cu -lpthread
//   ./staging_probe [reps]
//
// Prints "probe dir=H2D bytes=N workers=T chunk=C ring=R copy=K gbps=G" lines
// (median of reps) and "base dir=.. bytes=N pageable=G pinned=G".
#include <cuda_runtime.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "cuda_check.h"

namespace {

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Non-temporal stores: the destination is not read back by this CPU soon.
void CopyStream(void* dst, const void* src, size_t n) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  while (n != 0 && (reinterpret_cast<uintptr_t>(d) & 31) != 0) {
    *d++ = *s++;
    --n;
  }
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 64));
    __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i + 96), e);
  }
  _mm_sfence();
  memcpy(d + i, s + i, n - i);
}

using CopyFn = void (*)(void*, const void*, size_t);
void CopyLibc(void* d, const void* s, size_t n) { memcpy(d, s, n); }

// A fixed team of threads running one job at a time.
class Team {
 public:
  explicit Team(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~Team() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      ++gen_;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // Runs job() on every thread; returns at once (the caller polls for completion).
  void Start(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> l(mu_);
      job_ = std::move(job);
      ++gen_;
      running_ = static_cast<int>(threads_.size());
    }
    cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [this] { return running_ == 0; });
  }

 private:
  void Loop() {
    uint64_t seen = 0;
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return gen_ != seen; });
        seen = gen_;
        if (stop_) return;
        job = job_;
      }
      job();
      std::lock_guard<std::mutex> l(mu_);
      if (--running_ == 0) done_cv_.notify_all();
    }
  }
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::function<void()> job_;
  uint64_t gen_ = 0;
  int running_ = 0;
  bool stop_ = false;
};

struct Ring {
  std::vector<char*> slots;
  std::vector<cudaEvent_t> events;
  size_t chunk;
};

constexpr size_t kPiece = 256 << 10;

// One staged copy of n bytes between host and dev through the ring.
void Staged(Team& team, Ring& ring, bool h2d, char* host, char* dev, size_t n, cudaStream_t st,
            CopyFn copy) {
  const size_t C = ring.chunk;
  const int R = static_cast<int>(ring.slots.size());
  const size_t nchunks = (n + C - 1) / C;
  const size_t pieces_per_chunk = (C + kPiece - 1) / kPiece;
  std::vector<std::atomic<uint32_t>> done(nchunks);
  for (auto& d : done) d.store(0);
  std::atomic<size_t> next_piece{0};
  std::atomic<size_t> dma_issued{0};               // chunks whose DMA was queued
  std::vector<std::atomic<size_t>> slot_ready(R);  // chunk index + 1 whose DMA is known done
  for (auto& s : slot_ready) s.store(0);
  const size_t total_pieces = nchunks * pieces_per_chunk;
  auto chunk_len = [&](size_t k) { return std::min(C, n - k * C); };
  auto wait_dma = [&](size_t k) {  // DMA of chunk k finished
    while (dma_issued.load(std::memory_order_acquire) <= k) _mm_pause();
    const int s = static_cast<int>(k % R);
    if (slot_ready[s].load(std::memory_order_acquire) >= k + 1) return;
    while (cudaEventQuery(ring.events[s]) == cudaErrorNotReady) _mm_pause();
    size_t cur = slot_ready[s].load();
    while (cur < k + 1 && !slot_ready[s].compare_exchange_weak(cur, k + 1)) {
    }
  };
  auto issue = [&](size_t k) {
    const int s = static_cast<int>(k % R);
    if (h2d) {
      CHECK(cudaMemcpyAsync(dev + k * C, ring.slots[s], chunk_len(k), cudaMemcpyHostToDevice, st));
    } else {
      CHECK(cudaMemcpyAsync(ring.slots[s], dev + k * C, chunk_len(k), cudaMemcpyDeviceToHost, st));
    }
    CHECK(cudaEventRecord(ring.events[s], st));
    dma_issued.store(k + 1, std::memory_order_release);
  };
  team.Start([&] {
    for (;;) {
      const size_t p = next_piece.fetch_add(1);
      if (p >= total_pieces) return;
      const size_t k = p / pieces_per_chunk;
      const size_t off = (p % pieces_per_chunk) * kPiece;
      const size_t len = chunk_len(k);
      if (off < len) {
        const size_t m = std::min(kPiece, len - off);
        char* slot = ring.slots[k % R];
        if (h2d) {
          if (k >= static_cast<size_t>(R)) wait_dma(k - R);  // the slot's last DMA
          copy(slot + off, host + k * C + off, m);
        } else {
          wait_dma(k);
          copy(host + k * C + off, slot + off, m);
        }
      }
      done[k].fetch_add(1, std::memory_order_release);
    }
  });
  if (h2d) {
    for (size_t k = 0; k < nchunks; ++k) {
      while (done[k].load(std::memory_order_acquire) < pieces_per_chunk) _mm_pause();
      issue(k);
    }
    CHECK(cudaStreamSynchronize(st));
  } else {
    for (size_t k = 0; k < nchunks && k < static_cast<size_t>(R); ++k) issue(k);
    for (size_t k = 0; k < nchunks; ++k) {
      while (done[k].load(std::memory_order_acquire) < pieces_per_chunk) _mm_pause();
      if (k + R < nchunks) issue(k + R);
    }
  }
  team.Wait();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const int reps = argc > 1 ? atoi(argv[1]) : 5;
  const size_t kMax = size_t{256} << 20;
  char* dev;
  CHECK(cudaMalloc(&dev, kMax));
  char* host = static_cast<char*>(malloc(kMax));
  char* pinned;
  CHECK(cudaHostAlloc(&pinned, kMax, cudaHostAllocDefault));
  memset(host, 1, kMax);
  memset(pinned, 1, kMax);
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const size_t sizes[] = {size_t{1} << 20, size_t{4} << 20, size_t{16} << 20, size_t{64} << 20,
                          size_t{256} << 20};
  printf("cores %u\n", std::thread::hardware_concurrency());
  // Baselines: the driver on pageable and on pinned memory.
  for (size_t n : sizes) {
    for (int h2d = 1; h2d >= 0; --h2d) {
      std::vector<double> pg, pn;
      for (int r = 0; r < reps + 1; ++r) {
        memset(host, r, n);
        double t0 = NowS();
        CHECK(h2d ? cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice)
                  : cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost));
        double t1 = NowS();
        CHECK(h2d ? cudaMemcpy(dev, pinned, n, cudaMemcpyHostToDevice)
                  : cudaMemcpy(pinned, dev, n, cudaMemcpyDeviceToHost));
        double t2 = NowS();
        if (r == 0) continue;
        pg.push_back(n / (t1 - t0) / 1e9);
        pn.push_back(n / (t2 - t1) / 1e9);
      }
      printf("base dir=%s bytes=%zu pageable=%.2f pinned=%.2f\n", h2d ? "H2D" : "D2H", n,
             Median(pg), Median(pn));
    }
  }
  // Plain memcpy pageable -> pinned by one thread, for scale.
  for (int k = 0; k < 2; ++k) {
    CopyFn fn = k == 0 ? CopyLibc : CopyStream;
    std::vector<double> v;
    for (int r = 0; r < reps; ++r) {
      double t0 = NowS();
      fn(pinned, host, size_t{64} << 20);
      v.push_back((64 << 20) / (NowS() - t0) / 1e9);
    }
    printf("memcpy1 copy=%s gbps=%.2f\n", k == 0 ? "libc" : "stream", Median(v));
  }
  const int workers[] = {4, 8, 12, 15};
  const size_t chunks[] = {size_t{1} << 20, size_t{2} << 20, size_t{4} << 20, size_t{8} << 20};
  for (int T : workers) {
    Team team(T);
    for (size_t C : chunks) {
      for (int R : {4, 8}) {
        if (R == 8 && C > (size_t{2} << 20)) continue;
        Ring ring;
        ring.chunk = C;
        for (int s = 0; s < R; ++s) {
          char* p;
          CHECK(cudaHostAlloc(&p, C, cudaHostAllocDefault));
          memset(p, 0, C);
          ring.slots.push_back(p);
          cudaEvent_t e;
          CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
          ring.events.push_back(e);
        }
        for (int k = 0; k < 2; ++k) {
          CopyFn fn = k == 0 ? CopyLibc : CopyStream;
          for (size_t n : sizes) {
            for (int h2d = 1; h2d >= 0; --h2d) {
              std::vector<double> v;
              for (int r = 0; r < reps + 1; ++r) {
                if (h2d) memset(host, r + 7, n);
                double t0 = NowS();
                Staged(team, ring, h2d != 0, host, dev, n, st, fn);
                double dt = NowS() - t0;
                if (r > 0) v.push_back(n / dt / 1e9);
              }
              printf("probe dir=%s bytes=%zu workers=%d chunk=%zu ring=%d copy=%s gbps=%.2f\n",
                     h2d ? "H2D" : "D2H", n, T, C, R, k == 0 ? "libc" : "stream", Median(v));
            }
          }
        }
        // Correctness of the probe itself, once per ring: a round trip.
        for (size_t i = 0; i < (size_t{64} << 20); i += 4096) host[i] = static_cast<char>(i >> 12);
        Staged(team, ring, true, host, dev, size_t{64} << 20, st, CopyStream);
        memset(host, 0, size_t{64} << 20);
        Staged(team, ring, false, host, dev, size_t{64} << 20, st, CopyStream);
        size_t bad = 0;
        for (size_t i = 0; i < (size_t{64} << 20); i += 4096)
          bad += host[i] != static_cast<char>(i >> 12);
        if (bad != 0) printf("probe-error workers=%d chunk=%zu: %zu bad pages\n", T, C, bad);
        for (int s = 0; s < R; ++s) {
          cudaFreeHost(ring.slots[s]);
          cudaEventDestroy(ring.events[s]);
        }
      }
    }
  }
  printf("done\n");
  return 0;
}
