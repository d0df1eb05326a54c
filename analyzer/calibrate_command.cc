#include "analyzer/calibrate_command.h"

#include <cuda.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "shim/core/size.h"

namespace pinshim {
namespace {

constexpr uint64_t kMinCopy = uint64_t{4} << 10;
constexpr uint64_t kDefaultMaxCopy = uint64_t{256} << 20;
// Bytes moved per point (rounds of one size), bounded in rounds both ways.
constexpr uint64_t kBytesPerPoint = uint64_t{1} << 30;
constexpr int kMinRounds = 5, kMaxRounds = 200;

const char kUsage[] =
    "usage: pinshim calibrate [--output FILE] [--device N] [--max-size SIZE]\n"
    "\n"
    "Measures copy bandwidth between host and GPU on this machine through the\n"
    "CUDA driver (libcuda.so.1): pageable and pinned host memory, host to\n"
    "device and back, sizes from 4K up to SIZE (default 256M, each 16 times\n"
    "the last), the median of several rounds each. Writes the calibration file\n"
    "pinshim report --calibration reads (format: docs/calibration.md), to FILE\n"
    "or to stdout. Run it without pinshim (not under pinshim run) on an idle\n"
    "GPU.\n"
    "\n"
    "  --output FILE    write the file to FILE instead of stdout\n"
    "  --device N       the GPU to measure (default 0)\n"
    "  --max-size SIZE  the largest copy (default 256M)\n";

// The driver entry points calibrate calls, resolved from libcuda.so.1.
struct Driver {
  void* handle = nullptr;
  bool simulated = false;  // pinshim's own stand-in (tests/fakecuda)
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDriverGetVersion) version = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetName) device_name = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&::cuCtxSetCurrent) set_current = nullptr;
  decltype(&::cuCtxSynchronize) synchronize = nullptr;
  decltype(&::cuMemAlloc) mem_alloc = nullptr;
  decltype(&::cuMemFree) mem_free = nullptr;
  decltype(&::cuMemAllocHost) host_alloc = nullptr;
  decltype(&::cuMemFreeHost) host_free = nullptr;
  decltype(&::cuMemcpyHtoD) htod = nullptr;
  decltype(&::cuMemcpyDtoH) dtoh = nullptr;
};

template <typename F>
bool Resolve(void* handle, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  if (*out == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *out != nullptr;
}

bool LoadDriver(Driver* d, std::string* error) {
  d->handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (d->handle == nullptr) {
    *error = std::string("cannot load the CUDA driver (libcuda.so.1): ") + dlerror() +
             "; calibrate measures a GPU, so it runs on a machine with one";
    return false;
  }
  d->simulated = dlsym(d->handle, "fakecuda_call_count") != nullptr;
  std::string missing;
  Resolve(d->handle, "cuInit", &d->init, &missing);
  Resolve(d->handle, "cuDriverGetVersion", &d->version, &missing);
  Resolve(d->handle, "cuDeviceGet", &d->device_get, &missing);
  Resolve(d->handle, "cuDeviceGetName", &d->device_name, &missing);
  Resolve(d->handle, "cuDevicePrimaryCtxRetain", &d->retain, &missing);
  Resolve(d->handle, "cuCtxSetCurrent", &d->set_current, &missing);
  Resolve(d->handle, "cuCtxSynchronize", &d->synchronize, &missing);
  Resolve(d->handle, "cuMemAlloc_v2", &d->mem_alloc, &missing);
  Resolve(d->handle, "cuMemFree_v2", &d->mem_free, &missing);
  Resolve(d->handle, "cuMemAllocHost_v2", &d->host_alloc, &missing);
  Resolve(d->handle, "cuMemFreeHost", &d->host_free, &missing);
  Resolve(d->handle, "cuMemcpyHtoD_v2", &d->htod, &missing);
  Resolve(d->handle, "cuMemcpyDtoH_v2", &d->dtoh, &missing);
  if (!missing.empty()) *error = "the CUDA driver lacks " + missing;
  return missing.empty();
}

// Sets *error to message; returns false, for `return Fail(error, ...)`.
bool Fail(std::string* error, const std::string& message) {
  *error = message;
  return false;
}

std::string Failed(const char* call, CUresult r) {
  return std::string(call) + " failed with CUDA error " + std::to_string(static_cast<int>(r));
}

// Makes `device`'s primary context current; fills the header's device line.
bool OpenDevice(const Driver& d, int device, std::vector<std::string>* header, std::string* error) {
  CUresult r = d.init(0);
  if (r != CUDA_SUCCESS) return Fail(error, Failed("cuInit", r));
  CUdevice dev;
  if ((r = d.device_get(&dev, device)) != CUDA_SUCCESS) {
    return Fail(error,
                Failed("cuDeviceGet", r) + " (is there a device " + std::to_string(device) + "?)");
  }
  CUcontext ctx;
  if ((r = d.retain(&ctx, dev)) != CUDA_SUCCESS) {
    return Fail(error, Failed("cuDevicePrimaryCtxRetain", r));
  }
  if ((r = d.set_current(ctx)) != CUDA_SUCCESS) {
    return Fail(error, Failed("cuCtxSetCurrent", r));
  }
  char name[256] = "unknown";
  d.device_name(name, sizeof(name), dev);
  int version = 0;
  d.version(&version);
  header->push_back("device " + std::to_string(device) + ": " + name + ", driver API " +
                    std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10));
  return true;
}

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// The median bandwidth of copies of `bytes` from/to `host`, in GB/s; 0 and
// *error set when a copy failed.
double MeasureCopies(const Driver& d, bool to_device, void* host, CUdeviceptr dev, uint64_t bytes,
                     std::string* error) {
  const int rounds = static_cast<int>(
      std::min<uint64_t>(kMaxRounds, std::max<uint64_t>(kMinRounds, kBytesPerPoint / bytes)));
  std::vector<double> seconds;
  for (int i = -1; i < rounds; ++i) {  // round -1 warms up and is not kept
    const double start = Now();
    CUresult r = to_device ? d.htod(dev, host, bytes) : d.dtoh(host, dev, bytes);
    if (r == CUDA_SUCCESS) r = d.synchronize();
    const double took = Now() - start;
    if (r != CUDA_SUCCESS) {
      *error = Failed(to_device ? "cuMemcpyHtoD" : "cuMemcpyDtoH", r);
      return 0;
    }
    if (i >= 0) seconds.push_back(took);
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = std::max(seconds[seconds.size() / 2], 1e-9);
  return static_cast<double>(bytes) / median / 1e9;
}

struct Buffers {
  void* pageable = nullptr;
  void* pinned = nullptr;
  CUdeviceptr device = 0;
};

bool AllocateBuffers(const Driver& d, uint64_t bytes, Buffers* b, std::string* error) {
  b->pageable = std::malloc(bytes);
  if (b->pageable == nullptr) return Fail(error, "out of host memory");
  std::memset(b->pageable, 1, bytes);  // fault its pages in before timing
  CUresult r = d.host_alloc(&b->pinned, bytes);
  if (r != CUDA_SUCCESS) return Fail(error, Failed("cuMemAllocHost", r));
  std::memset(b->pinned, 1, bytes);
  if ((r = d.mem_alloc(&b->device, bytes)) != CUDA_SUCCESS) {
    return Fail(error, Failed("cuMemAlloc", r));
  }
  return true;
}

void FreeBuffers(const Driver& d, const Buffers& b) {
  std::free(b.pageable);
  if (b.pinned != nullptr) d.host_free(b.pinned);
  if (b.device != 0) d.mem_free(b.device);
}

bool Measure(const Driver& d, uint64_t max_bytes, std::vector<CalibrationPoint>* points,
             std::string* error) {
  const std::vector<uint64_t> sizes = CalibrationSizes(max_bytes);
  Buffers b;
  bool ok = AllocateBuffers(d, sizes.back(), &b, error);
  for (int dir = 0; ok && dir < 2; ++dir) {
    for (int pinned = 0; ok && pinned < 2; ++pinned) {
      for (uint64_t bytes : sizes) {
        const double gbps =
            MeasureCopies(d, dir == 0, pinned ? b.pinned : b.pageable, b.device, bytes, error);
        if (!(ok = gbps > 0)) break;
        points->push_back({dir == 0 ? "H2D" : "D2H", pinned ? "pinned" : "pageable", bytes, gbps});
      }
    }
  }
  FreeBuffers(d, b);
  return ok;
}

std::string SizeText(uint64_t bytes) {
  static const char* const kUnits[] = {"", "K", "M", "G", "T"};
  int unit = 0;
  while (unit < 4 && bytes % 1024 == 0 && bytes >= 1024) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + kUnits[unit];
}

int Complain(const std::string& message) {
  std::fprintf(stderr, "pinshim calibrate: %s\n", message.c_str());
  return 2;
}

struct CalibrateArgs {
  std::string output;
  int device = 0;
  uint64_t max_bytes = kDefaultMaxCopy;
};

// Returns -1 when the arguments are good, else the exit status.
int ParseArgs(int argc, char** argv, CalibrateArgs* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    if (name != "--output" && name != "--device" && name != "--max-size") {
      return Complain("unknown option \"" + a + "\"; see pinshim calibrate --help");
    }
    std::string value;
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    }
    if (value.empty()) return Complain(name + " needs a value; see pinshim calibrate --help");
    char* end = nullptr;
    char err[256];
    if (name == "--output") {
      args->output = value;
    } else if (name == "--device") {
      const long device = std::strtol(value.c_str(), &end, 10);
      if (*end != '\0' || device < 0 || device > 1024) {
        return Complain("--device \"" + value + "\": expected a device number, e.g. 0");
      }
      args->device = static_cast<int>(device);
    } else if (!ParseSize(value.c_str(), 0, &args->max_bytes, err, sizeof(err)) ||
               args->max_bytes < kMinCopy) {
      return Complain("--max-size \"" + value + "\": expected a size of at least 4K, e.g. 64M");
    }
  }
  return -1;
}

bool WriteOutput(const std::string& path, const std::string& text, std::string* error) {
  FILE* f = path.empty() ? stdout : std::fopen(path.c_str(), "w");
  if (f == nullptr) return Fail(error, path + ": " + std::strerror(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (path.empty() ? std::fflush(f) : std::fclose(f)) == 0 && ok;
  if (!ok) *error = (path.empty() ? "stdout" : path) + ": " + std::strerror(errno);
  return ok;
}

}  // namespace

std::vector<uint64_t> CalibrationSizes(uint64_t max_bytes) {
  std::vector<uint64_t> sizes = {kMinCopy};
  while (sizes.back() <= max_bytes / 16) sizes.push_back(sizes.back() * 16);
  return sizes;
}

std::string FormatCalibration(const std::vector<std::string>& header_lines,
                              const std::vector<CalibrationPoint>& points) {
  std::string out;
  for (const std::string& line : header_lines) out += "# " + line + "\n";
  out += "# DIRECTION KIND SIZE GBPS\n";
  for (const CalibrationPoint& p : points) {
    char gbps[32];
    std::snprintf(gbps, sizeof(gbps), "%.3f", p.gbps);
    out += std::string(p.direction) + " " + p.kind + " " + SizeText(p.bytes) + " " + gbps + "\n";
  }
  return out;
}

int RunCalibrateCommand(int argc, char** argv) {
  CalibrateArgs args;
  const int status = ParseArgs(argc, argv, &args);
  if (status >= 0) return status;
  const char* preload = getenv("LD_PRELOAD");
  if (preload != nullptr && std::strstr(preload, "libpinshim") != nullptr) {
    return Complain(
        "libpinshim.so is preloaded (LD_PRELOAD): run calibrate on its own, "
        "not under pinshim run, to measure the driver's own copies");
  }
  Driver driver;
  std::string error;
  std::vector<std::string> header = {
      "pinshim calibration: copy bandwidths in GB/s measured by "
      "pinshim calibrate (docs/calibration.md)"};
  std::vector<CalibrationPoint> points;
  if (!LoadDriver(&driver, &error) || !OpenDevice(driver, args.device, &header, &error) ||
      !Measure(driver, args.max_bytes, &points, &error)) {
    return Complain(error);
  }
  if (driver.simulated) {
    header.push_back(
        "simulated driver (tests/fakecuda): these figures are this machine's memory "
        "copies, not a GPU's, and mean nothing for a real program");
    std::fprintf(stderr,
                 "pinshim calibrate: the driver is pinshim's simulated one (tests/fakecuda): "
                 "the figures mean nothing for a GPU\n");
  }
  if (!WriteOutput(args.output, FormatCalibration(header, points), &error)) {
    return Complain(error);
  }
  if (!args.output.empty()) {
    std::fprintf(stderr, "pinshim calibrate: %zu points written to %s\n", points.size(),
                 args.output.c_str());
  }
  return 0;
}

}  // namespace pinshim
