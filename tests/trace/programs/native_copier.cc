// Called from tests/trace/programs/python_misuse.py through ctypes: copies
// from a thread the Python interpreter never saw, so its stacks have no
// Python thread state.
#include <cuda.h>

#include <cstdlib>
#include <thread>

extern "C" int copy_from_native_thread(CUdeviceptr dev, size_t bytes, int times) {
  int result = 0;
  std::thread t([&] {
    CUcontext ctx = nullptr;
    result = cuDevicePrimaryCtxRetain(&ctx, 0);
    if (result == 0) result = cuCtxSetCurrent(ctx);
    void* host = malloc(bytes);
    for (int i = 0; i < times && result == 0; ++i) {
      result = cuMemcpyHtoD(dev, host, bytes);  // MISUSE(pageable-hot)
    }
    free(host);
  });
  t.join();
  return result;
}
