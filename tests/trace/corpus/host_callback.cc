// Host callbacks consume results, as pipelines built on cudaLaunchHostFunc
// do: each download is followed by a host function that reads (memcpy) the
// downloaded bytes on the driver's thread, which runs it only once the work
// queued before it finished; the main thread waits for the stream before it
// reuses the buffers.
#include <atomic>
#include <vector>

#include "tests/trace/corpus/corpus.h"

namespace {

constexpr size_t kBytes = 256 << 10;

struct Job {
  void* pinned;
  std::vector<unsigned char> copy;
  unsigned seed;
  std::atomic<int> done{0};
  bool ok = false;
};

void CUDA_CB Consume(void* arg) {
  Job* job = static_cast<Job*>(arg);
  job->copy.resize(kBytes);
  memcpy(job->copy.data(), job->pinned, kBytes);
  job->ok = corpus::Holds(job->copy.data(), kBytes, job->seed);
  job->done.store(1);
}

void CUDA_CB ConsumeCallback(CUstream, CUresult status, void* arg) {
  if (status == CUDA_SUCCESS) Consume(arg);
}

}  // namespace

int main() {
  corpus::Init();
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr dev;
  CHECK(cuMemAlloc(&dev, kBytes));
  std::vector<Job> jobs(4);
  for (Job& j : jobs) CHECK(cuMemHostAlloc(&j.pinned, kBytes, 0));
  void* up;
  CHECK(cuMemAllocHost(&up, kBytes));
  for (unsigned i = 0; i < jobs.size(); ++i) {
    Job& j = jobs[i];
    j.seed = 40 + i;
    CHECK(cuStreamSynchronize(s));  // `up` is reused
    corpus::Fill(up, kBytes, j.seed);
    CHECK(cuMemcpyHtoDAsync(dev, up, kBytes, s));
    CHECK(cuMemcpyDtoHAsync(j.pinned, dev, kBytes, s));
    if (i % 2 == 0) {
      CHECK(cuLaunchHostFunc(s, Consume, &j));
    } else {
      CHECK(cuStreamAddCallback(s, ConsumeCallback, &j, 0));
    }
  }
  CHECK(cuStreamSynchronize(s));
  bool ok = true;
  for (Job& j : jobs) ok = ok && j.done.load() == 1 && j.ok;
  for (Job& j : jobs) CHECK(cuMemFreeHost(j.pinned));
  CHECK(cuMemFreeHost(up));
  CHECK(cuMemFree(dev));
  CHECK(cuStreamDestroy(s));
  return corpus::Finish(ok, "host_callback");
}
