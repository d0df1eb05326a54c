// Writes traces crafted to attack `pinshim report`, for the hostile-input
// tests (tests/attack) and for measuring the reader by hand:
//
//   make_crafted_trace resync OUT MIB     a valid header, then MIB MiB of bytes
//                                         in which every other offset looks like
//                                         the header of a frame of about 2 MiB
//                                         whose checksum fails: the worst case
//                                         of the reader's resynchronisation
//   make_crafted_trace names OUT          hot pageable copies whose program,
//                                         module, Python file and function
//                                         names hold terminal escapes,
//                                         newlines and HTML markup
//   make_crafted_trace module OUT PATH    the same copies, with a stack in a
//                                         module at PATH (a FIFO, a device)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/trace/trace_builder.h"

namespace {

using pinshim::CopyDir;
using pinshim::CopyEvent;
using pinshim::MemKind;
using pinshim::testing::BuilderModule;
using pinshim::testing::BuilderProcess;
using pinshim::testing::TraceBuilder;
namespace trace = pinshim::trace;

// Every name a report prints, with something in it a terminal or a browser
// would act on.
constexpr char kHostile[] = "\x1b[2J\x1b]0;owned\x07\r\nFAKE REPORT LINE <!--<script>&";

bool Write(const std::string& path, const std::string& bytes) {
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return fclose(f) == 0 && ok;
}

// Byte pattern of the resync case: odd bytes 0 and even bytes in [1, 32],
// so that at every even offset the length field reads e0 + (e1 << 16) (at
// most about 2 MiB), the type byte is a known type, and the checksum fails.
std::string Resync(size_t mib) {
  TraceBuilder b;
  std::string out = b.bytes().substr(0, trace::kFileHeaderBytes);
  const size_t n = mib << 20;
  out.reserve(out.size() + n);
  uint32_t x = 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    out.push_back(i % 2 == 1 ? '\0' : static_cast<char>(1 + (x >> 16) % 32));
  }
  return out;
}

CopyEvent PageableCopy(uint64_t t) {
  CopyEvent e{};
  e.api = 1;
  e.dir = CopyDir::kHostToDevice;
  e.src_kind = MemKind::kPageable;
  e.dst_kind = MemKind::kDevice;
  e.bytes = 64 << 20;
  e.host_ptr = reinterpret_cast<void*>(0x10000);
  e.host_alloc_id = 1;
  e.stream = reinterpret_cast<void*>(0x50);
  e.start_ns = t;
  e.end_ns = t + 20000000;
  return e;
}

// Hot pageable copies from one site, in a program and module named as asked.
std::string HotCopies(const std::string& program, const std::string& module_path,
                      const std::string& python_text) {
  TraceBuilder b;
  BuilderProcess p;
  p.program = program;
  b.Process(p);
  b.ApiNames({{1, "cuMemcpyHtoD_v2"}});
  BuilderModule m;
  m.path = module_path;
  m.build_id = "\x01\x02\x03\x04";
  m.start = 0x400000;
  m.length = 0x10000;
  b.Modules(1, {m});
  b.PythonCode(1, "/app/" + python_text + ".py", "step" + python_text, 10);
  b.PythonStack(1, 1, {0x400100, 0x400200}, trace::PythonStatus::kFrames, {{1, 12}});
  uint64_t t = 2000000000;
  auto& e = b.batch();
  pinshim::HostAllocEvent h{1, reinterpret_cast<void*>(0x10000), 64 << 20, false, 0};
  e.AppendHostAlloc(h, t, 1);
  for (int i = 0; i < 200; ++i) {
    b.MakeRoom(7);
    b.batch().AppendCopy(PageableCopy(t + 1000 + i * 30000000ull), 1, 1);
  }
  b.Flush(7);
  b.End(t + 7000000000ull);
  return b.bytes();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "resync" && argc == 4) return Write(argv[2], Resync(strtoul(argv[3], 0, 10))) ? 0 : 1;
  if (what == "names" && argc == 3) {
    const std::string hostile = kHostile;
    return Write(argv[2],
                 HotCopies("/usr/bin/app" + hostile, "/opt/lib" + hostile + ".so", hostile))
               ? 0
               : 1;
  }
  if (what == "module" && argc == 4) return Write(argv[2], HotCopies("app", argv[3], "x")) ? 0 : 1;
  fprintf(stderr, "usage: make_crafted_trace resync OUT MIB | names OUT | module OUT PATH\n");
  return 2;
}
