// A captured graph of copies, launched again and again (the pattern of
// CUDA-graph training steps): upload, device-side step and download are
// captured once on a stream, with a second stream forked in and joined
// through events, and a host function that counts the steps; each step
// fills the input, launches the graph and synchronizes before reading the
// output. (The host function is a graph node, called at every launch.)
#include <atomic>

#include "tests/trace/corpus/corpus.h"

namespace {
void CUDA_CB CountStep(void* arg) { static_cast<std::atomic<int>*>(arg)->fetch_add(1); }
}  // namespace

int main() {
  corpus::Init();
  constexpr size_t kBytes = 256 << 10;
  CUstream s, side;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING));
  void* in;
  void* out;
  CHECK(cuMemHostAlloc(&in, kBytes, 0));
  CHECK(cuMemHostAlloc(&out, kBytes, 0));
  CUdeviceptr a, b;
  CHECK(cuMemAlloc(&a, kBytes));
  CHECK(cuMemAlloc(&b, kBytes));
  CUevent fork, join;
  CHECK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CHECK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));

  CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CHECK(cuMemcpyHtoDAsync(a, in, kBytes, s));
  CHECK(cuEventRecord(fork, s));
  CHECK(cuStreamWaitEvent(side, fork, 0));
  CHECK(cuMemcpyDtoDAsync(b, a, kBytes, side));
  std::atomic<int> steps{0};
  CHECK(cuLaunchHostFunc(side, CountStep, &steps));
  CHECK(cuEventRecord(join, side));
  CHECK(cuStreamWaitEvent(s, join, 0));
  CHECK(cuMemcpyDtoHAsync(out, b, kBytes, s));
  CUgraph graph;
  CHECK(cuStreamEndCapture(s, &graph));
  CUgraphExec exec;
  CHECK(cuGraphInstantiate(&exec, graph, 0));

  bool ok = true;
  for (int step = 0; step < 6; ++step) {
    corpus::Fill(in, kBytes, step);
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    ok = ok && corpus::Holds(out, kBytes, step);
  }
  ok = ok && steps.load() == 6;
  CHECK(cuGraphExecDestroy(exec));
  CHECK(cuGraphDestroy(graph));
  CHECK(cuEventDestroy(fork));
  CHECK(cuEventDestroy(join));
  CHECK(cuMemFree(a));
  CHECK(cuMemFree(b));
  CHECK(cuMemFreeHost(in));
  CHECK(cuMemFreeHost(out));
  CHECK(cuStreamDestroy(s));
  CHECK(cuStreamDestroy(side));
  return corpus::Finish(ok, "captured_graph");
}
