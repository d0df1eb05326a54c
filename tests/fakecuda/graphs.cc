// Stream capture and graph launch, for graphs of copies, event records and
// host functions (what capture records here; kernels are not simulated).
// A stream's work between cuStreamBeginCapture and cuStreamEndCapture is
// appended to the graph instead of running (streams.cc: Submit, EventRecord,
// HostFunc); streams that wait for an event recorded in the capture join it.
// cuGraphInstantiate snapshots the nodes; cuGraphLaunch queues them on the
// launch stream in capture order.
#include "tests/fakecuda/driver_behavior.h"
#include "tests/fakecuda/internal.h"

namespace fakecuda {
namespace {

CUresult BeginCapture(CUstream handle, bool per_thread_api, CUstreamCaptureMode mode) {
  if (CUresult err = RequireInit()) return err;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(handle, per_thread_api, &stream)) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  // The legacy stream cannot capture: it synchronizes with everything.
  if (stream->kind == Stream::Kind::kLegacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (stream->capture) return CUDA_ERROR_ILLEGAL_STATE;
  stream->capture = std::make_shared<Graph>();
  stream->capture_origin = true;
  return CUDA_SUCCESS;
}

CUresult EndCapture(CUstream handle, bool per_thread_api, CUgraph* out) {
  if (CUresult err = RequireInit()) return err;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(handle, per_thread_api, &stream)) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!stream->capture) return CUDA_ERROR_ILLEGAL_STATE;
  if (!stream->capture_origin) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  std::shared_ptr<Graph> graph = stream->capture;
  graph->capturing = false;
  for (auto& entry : s.streams) {
    if (entry.second->capture == graph) {
      entry.second->capture.reset();
      entry.second->capture_origin = false;
    }
  }
  if (graph->invalidated) {
    *out = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  s.graphs[graph.get()] = graph;
  *out = reinterpret_cast<CUgraph>(graph.get());
  return CUDA_SUCCESS;
}

CUresult IsCapturing(CUstream handle, bool per_thread_api, CUstreamCaptureStatus* status) {
  if (CUresult err = RequireInit()) return err;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(handle, per_thread_api, &stream)) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!stream->capture) {
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
  } else {
    *status = stream->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                           : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  }
  return CUDA_SUCCESS;
}

CUresult Instantiate(CUgraphExec* out, CUgraph handle) {
  if (CUresult err = RequireInit()) return err;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.graphs.find(reinterpret_cast<Graph*>(handle));
  if (handle == nullptr || it == s.graphs.end()) return CUDA_ERROR_INVALID_VALUE;
  auto exec = std::make_shared<Graph>(*it->second);
  exec->capturing = false;
  s.execs[exec.get()] = exec;
  *out = reinterpret_cast<CUgraphExec>(exec.get());
  return CUDA_SUCCESS;
}

CUresult Launch(CUgraphExec handle, CUstream stream_handle, bool per_thread_api) {
  if (CUresult err = RequireInit()) return err;
  std::shared_ptr<Graph> exec;
  {
    State& s = S();
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.execs.find(reinterpret_cast<Graph*>(handle));
    if (handle == nullptr || it == s.execs.end()) return CUDA_ERROR_INVALID_VALUE;
    exec = it->second;
  }
  std::shared_ptr<Stream> stream;
  if (CUresult err = ResolveStream(stream_handle, per_thread_api, &stream)) return err;
  return EnqueueGraph(stream, *exec);
}

template <typename Map>
CUresult Erase(Map& map, void* handle) {
  if (CUresult err = RequireInit()) return err;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  // Launches already queued hold their own copies of the nodes.
  return map.erase(static_cast<Graph*>(handle)) != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace
}  // namespace fakecuda

extern "C" {

CUresult cuStreamBeginCapture(CUstream hStream) {
  FAKECUDA_ENTER("cuStreamBeginCapture");
  return fakecuda::BeginCapture(hStream, false, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  FAKECUDA_ENTER("cuStreamBeginCapture");
  return fakecuda::BeginCapture(hStream, true, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  FAKECUDA_ENTER("cuStreamBeginCapture");
  return fakecuda::BeginCapture(hStream, false, mode);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  FAKECUDA_ENTER("cuStreamBeginCapture");
  return fakecuda::BeginCapture(hStream, true, mode);
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  FAKECUDA_ENTER("cuStreamEndCapture");
  return fakecuda::EndCapture(hStream, false, phGraph);
}

CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  FAKECUDA_ENTER("cuStreamEndCapture");
  return fakecuda::EndCapture(hStream, true, phGraph);
}

// Each thread's capture interaction mode (global until exchanged). Kept and
// answered; what a mode prohibits during another thread's capture is not
// simulated.
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  FAKECUDA_ENTER("cuThreadExchangeStreamCaptureMode");
  static thread_local CUstreamCaptureMode current = CU_STREAM_CAPTURE_MODE_GLOBAL;
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      *mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUstreamCaptureMode previous = current;
  current = *mode;
  *mode = previous;
  return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  FAKECUDA_ENTER("cuStreamIsCapturing");
  return fakecuda::IsCapturing(hStream, false, captureStatus);
}

CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  FAKECUDA_ENTER("cuStreamIsCapturing");
  return fakecuda::IsCapturing(hStream, true, captureStatus);
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                     unsigned long long flags) {
  FAKECUDA_ENTER("cuGraphInstantiateWithFlags");
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;  // none of the flags is simulated
  return fakecuda::Instantiate(phGraphExec, hGraph);
}

// The ABI of CUDA 10 and 11 (cuGraphInstantiate_v2 in cuda.h's spelling).
CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                               char* logBuffer, size_t bufferSize) {
  FAKECUDA_ENTER("cuGraphInstantiate");
  if (phErrorNode != nullptr) *phErrorNode = nullptr;
  if (logBuffer != nullptr && bufferSize > 0) logBuffer[0] = '\0';
  return fakecuda::Instantiate(phGraphExec, hGraph);
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  FAKECUDA_ENTER("cuGraphLaunch");
  return fakecuda::Launch(hGraphExec, hStream, false);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  FAKECUDA_ENTER("cuGraphLaunch");
  return fakecuda::Launch(hGraphExec, hStream, true);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  FAKECUDA_ENTER("cuGraphExecDestroy");
  return fakecuda::Erase(fakecuda::S().execs, hGraphExec);
}

CUresult cuGraphDestroy(CUgraph hGraph) {
  FAKECUDA_ENTER("cuGraphDestroy");
  return fakecuda::Erase(fakecuda::S().graphs, hGraph);
}

}  // extern "C"
