// Builds pinshim traces in memory, frame by frame, for tests, benchmarks and
// the fuzzer's seed corpus: the same encoders as the recorder, without a
// running recorder, unwinding or files.
#ifndef PINSHIM_TESTS_TRACE_TRACE_BUILDER_H_
#define PINSHIM_TESTS_TRACE_TRACE_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "shim/trace/event_encoder.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace testing {

// One module of a module map, with one executable segment.
struct BuilderModule {
  std::string path;
  std::string build_id;  // raw bytes; "" for none
  uint64_t bias = 0;
  uint64_t start = 0;
  uint64_t length = 0;
};

struct BuilderProcess {
  uint64_t pid = 4242;
  std::string program = "/usr/bin/app";
  uint64_t start_ns = 1000000000;
  uint64_t physical_bytes = 64ull << 30;
  uint64_t memlock_limit = UINT64_MAX;
  uint64_t budget_bytes = 0;
  int64_t rank = -1;
  std::string mode = "observe";
  uint64_t page_size = 4096;
};

class TraceBuilder {
 public:
  // Starts with the file header.
  TraceBuilder();

  // Appends one frame with a correct checksum.
  void Frame(trace::FrameType type, const std::string& payload);
  void Process(const BuilderProcess& p);
  // One module map generation with a single module covering [start, start+len).
  void Modules(uint32_t generation, const std::string& path, uint64_t start, uint64_t len);
  // One module map generation listing `modules` (the first is the program).
  void Modules(uint32_t generation, const std::vector<BuilderModule>& modules);
  void Stack(uint32_t id, uint32_t generation, const std::vector<uint64_t>& ips);
  // A stack with a Python section: (code id, line) pairs innermost first.
  void PythonStack(uint32_t id, uint32_t generation, const std::vector<uint64_t>& ips,
                   trace::PythonStatus status,
                   const std::vector<std::pair<uint32_t, uint32_t>>& frames, uint64_t omitted = 0);
  void PythonCode(uint32_t id, const std::string& file, const std::string& function,
                  uint32_t first_line);
  void ApiNames(const std::vector<std::pair<uint32_t, std::string>>& names);
  void End(uint64_t end_ns);

  // The batch being filled; Flush() writes it as a kEvents frame of `tid`.
  trace::BatchEncoder& batch() { return enc_; }
  void Flush(uint32_t tid);
  // Flushes first when the batch is nearly full.
  void MakeRoom(uint32_t tid) {
    if (!enc_.HasRoom()) Flush(tid);
  }

  const std::string& bytes() const { return out_; }
  std::string& mutable_bytes() { return out_; }
  bool WriteTo(const std::string& path) const;

 private:
  std::string out_;
  std::vector<uint8_t> buf_;
  trace::BatchEncoder enc_;
};

}  // namespace testing
}  // namespace pinshim

#endif  // PINSHIM_TESTS_TRACE_TRACE_BUILDER_H_
