// Stream capture and graph launch, for graphs of copies, event records and
// host functions (what capture records here; kernels are not simulated).
// A stream's work between cuStreamBeginCapture and cuStreamEndCapture is
// appended to the graph instead of running (streams.cc: Submit, EventRecord,
// HostFunc); streams that wait for an event recorded in the capture join it.
// cuGraphInstantiate snapshots the nodes; cuGraphLaunch queues them on the
// launch stream in capture order.
#include <algorithm>
#include <thread>

#include "tests/fakecuda/driver_behavior.h"
#include "tests/fakecuda/internal.h"

namespace fakecuda {
namespace {

// The calling thread's capture interaction mode (cuThreadExchangeStreamCaptureMode).
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

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
  stream->capture->owner = std::this_thread::get_id();
  stream->capture->mode = mode;
  stream->capture_origin = true;
  s.open_captures.push_back(stream->capture);
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
  CloseCaptureLocked(s, graph);
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

// Measured on the H200 (bench/gpu/page_facts.cu, capture_neighbour_*): while one
// thread captures in global mode, another thread in global mode has
// cuMemHostRegister, cuMemHostUnregister, cuMemHostAlloc, cuMemFreeHost and
// cuEventSynchronize refused, and its asynchronous pageable copy on a stream
// that does not capture runs but invalidates the capture; in relaxed mode
// all of them succeed and the capture survives. The rest of the rule is the
// documentation's.
bool ProhibitedByCaptureLocked() {
  const CUstreamCaptureMode mine = t_capture_mode;
  if (mine == CU_STREAM_CAPTURE_MODE_RELAXED) return false;
  const std::thread::id me = std::this_thread::get_id();
  bool prohibited = false;
  for (const std::shared_ptr<Graph>& g : S().open_captures) {
    const bool prohibits = g->owner == me ? g->mode != CU_STREAM_CAPTURE_MODE_RELAXED
                                          : mine == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                                                g->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (prohibits) {
      g->invalidated = true;
      prohibited = true;
    }
  }
  return prohibited;
}

void CloseCaptureLocked(State& s, const std::shared_ptr<Graph>& graph) {
  graph->capturing = false;
  s.open_captures.erase(std::remove(s.open_captures.begin(), s.open_captures.end(), graph),
                        s.open_captures.end());
}

CUresult RefuseDuringCapture() {
  std::lock_guard<std::mutex> lock(S().mu);
  return ProhibitedByCaptureLocked() ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

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

// Each thread's capture interaction mode (global until exchanged): what it
// prohibits is fakecuda::ProhibitedByCaptureLocked.
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  FAKECUDA_ENTER("cuThreadExchangeStreamCaptureMode");
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      *mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const CUstreamCaptureMode previous = fakecuda::t_capture_mode;
  fakecuda::t_capture_mode = *mode;
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
