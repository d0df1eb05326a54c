// Makes a fleet's worth of traces from a few recorded ones, for the fleet
// analysis's test and benchmark:
//
//   make_fleet_traces --out DIR --count N [--hosts H] [--programs P]
//                     [--rebuild-every K] SEED.pstrace...
//
// Trace i copies seed i mod S (S seeds) frame by frame, each frame written
// again by the format's own writer (shim/trace/frame_writer.h), so every
// checksum holds. Its process record is rewritten: round r = i / S (one
// trace of each seed) runs on host "node-<r mod H>" as program
// "<seed's program>-<variant>" with variant (r / H) mod P, its wall-clock
// start shifted by r / H seconds; pid and rank come from i. Every
// K-th variant is "another build" of its program: the main program's build
// id changes in the module records, so its call sites get other keys and
// cannot be symbolized from the file on disk. Traces go to
// DIR/<host>/<program>.<pid>.pstrace. Exit status 0, or 2 with a line on
// stderr.
#include <sys/uio.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "shim/trace/crc32c.h"
#include "shim/trace/frame_writer.h"
#include "shim/trace/trace_format.h"

namespace pinshim {
namespace {

using trace::FrameType;
using trace::ProcessTag;

struct Frame {
  FrameType type;
  std::string payload;
};

struct Seed {
  std::string path;
  std::string program;  // from its process record
  std::vector<Frame> frames;
};

struct Options {
  std::string out;
  long count = 0;
  long hosts = 16;
  long programs = 4;
  long rebuild_every = 0;
  std::vector<std::string> seeds;
};

[[noreturn]] void Fail(const std::string& line) {
  fprintf(stderr, "make_fleet_traces: %s\n", line.c_str());
  exit(2);
}

void AddVarint(std::string* s, uint64_t v) {
  uint8_t tmp[trace::kMaxVarint];
  s->append(reinterpret_cast<char*>(tmp), trace::PutVarint(tmp, v) - tmp);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(path + ": cannot be read");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The seed's frames; a seed with a bad checksum is refused, as copying it
// would make damaged bytes look whole.
Seed LoadSeed(const std::string& path) {
  Seed seed;
  seed.path = path;
  const std::string data = ReadAll(path);
  if (data.size() < trace::kFileHeaderBytes ||
      memcmp(data.data(), trace::kTraceMagic, sizeof(trace::kTraceMagic)) != 0) {
    Fail(path + ": not a pinshim trace");
  }
  size_t pos = trace::kFileHeaderBytes;
  while (pos + trace::kFrameHeaderBytes <= data.size()) {
    const uint8_t* h = reinterpret_cast<const uint8_t*>(data.data() + pos);
    const uint32_t len = trace::LoadU32(h + 4);
    if (pos + trace::kFrameHeaderBytes + len > data.size()) Fail(path + ": torn frame at the end");
    const uint32_t crc = trace::Crc32cExtend(trace::Crc32c(h + 8, 1), h + 9, len);
    if (trace::MaskCrc(crc) != trace::LoadU32(h)) Fail(path + ": a frame's checksum is wrong");
    seed.frames.push_back({static_cast<FrameType>(h[8]), data.substr(pos + 9, len)});
    pos += trace::kFrameHeaderBytes + len;
  }
  return seed;
}

// Calls f(tag, value) for each (tag, value) of a process record.
template <typename F>
bool ForEachTag(const std::string& payload, F f) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(payload.data());
  const uint8_t* end = p + payload.size();
  while (p < end) {
    uint64_t tag, len;
    if (!trace::GetVarint(&p, end, &tag) || !trace::GetVarint(&p, end, &len) ||
        len > static_cast<uint64_t>(end - p)) {
      return false;
    }
    f(static_cast<ProcessTag>(tag), std::string(reinterpret_cast<const char*>(p), len));
    p += len;
  }
  return true;
}

std::string VarintText(uint64_t v) {
  std::string s;
  AddVarint(&s, v);
  return s;
}

uint64_t ValueOf(const std::string& value) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(value.data());
  uint64_t v = 0;
  trace::GetVarint(&p, p + value.size(), &v);
  return v;
}

struct Identity {
  std::string host;
  std::string program;
  uint64_t pid;
  int64_t rank;
  uint64_t start_shift_ns;
};

std::string RewriteProcess(const std::string& payload, const Identity& id) {
  std::string out;
  auto put = [&](ProcessTag tag, const std::string& value) {
    AddVarint(&out, static_cast<uint64_t>(tag));
    AddVarint(&out, value.size());
    out += value;
  };
  const bool ok = ForEachTag(payload, [&](ProcessTag tag, const std::string& value) {
    switch (tag) {
      case ProcessTag::kPid: put(tag, VarintText(id.pid)); break;
      case ProcessTag::kProgram: put(tag, id.program); break;
      case ProcessTag::kCommandLine: put(tag, id.program); break;
      case ProcessTag::kHostname: put(tag, id.host); break;
      case ProcessTag::kRank: put(tag, VarintText(trace::ZigZag(id.rank))); break;
      case ProcessTag::kStartRealtimeNs:
        put(tag, VarintText(ValueOf(value) + id.start_shift_ns));
        break;
      default: put(tag, value); break;
    }
  });
  if (!ok) Fail("a seed's process record does not parse");
  return out;
}

// The module record with the main program's build id changed by `salt`.
std::string RewriteModules(const std::string& payload, uint8_t salt) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(payload.data());
  const uint8_t* end = p + payload.size();
  std::string out;
  uint64_t v, count;
  auto copy_varint = [&](uint64_t* into) {
    if (!trace::GetVarint(&p, end, into)) Fail("a seed's module record does not parse");
    AddVarint(&out, *into);
  };
  auto read_text = [&]() {
    uint64_t len;
    if (!trace::GetVarint(&p, end, &len) || len > static_cast<uint64_t>(end - p)) {
      Fail("a seed's module record does not parse");
    }
    std::string s(reinterpret_cast<const char*>(p), len);
    p += len;
    return s;
  };
  copy_varint(&v);  // generation
  copy_varint(&count);
  for (uint64_t m = 0; m < count; ++m) {
    const std::string path = read_text();
    std::string build_id = read_text();
    uint64_t bias, flags, segments;
    if (!trace::GetVarint(&p, end, &bias) || !trace::GetVarint(&p, end, &flags)) {
      Fail("a seed's module record does not parse");
    }
    if ((flags & trace::kModuleMainProgram) != 0 && !build_id.empty()) {
      build_id.back() = static_cast<char>(build_id.back() ^ salt);
    }
    AddVarint(&out, path.size());
    out += path;
    AddVarint(&out, build_id.size());
    out += build_id;
    AddVarint(&out, bias);
    AddVarint(&out, flags);
    copy_varint(&segments);
    for (uint64_t s = 0; s < 2 * segments; ++s) copy_varint(&v);
  }
  out.append(reinterpret_cast<const char*>(p), end - p);  // fields a newer writer appended
  return out;
}

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void WriteOne(const Seed& seed, const Identity& id, uint8_t build_salt, const std::string& dir) {
  char path[4096], err[256];
  const int fd = trace::CreateTraceFile(dir.c_str(), id.program.c_str(), static_cast<long>(id.pid),
                                        path, sizeof(path), err, sizeof(err));
  if (fd < 0) Fail(err);
  for (const Frame& f : seed.frames) {
    std::string payload = f.payload;
    if (f.type == FrameType::kProcess) payload = RewriteProcess(payload, id);
    if (f.type == FrameType::kModules && build_salt != 0)
      payload = RewriteModules(payload, build_salt);
    struct iovec part = {&payload[0], payload.size()};
    int error = 0;
    if (!trace::WriteFrame(fd, f.type, &part, 1, &error))
      Fail(std::string(path) + ": " + strerror(error));
  }
  close(fd);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto number = [&](long* into) {
      if (i + 1 >= argc) Fail(a + " needs a number");
      *into = strtol(argv[++i], nullptr, 10);
      if (*into < 0) Fail(a + " needs a number of at least 0");
    };
    if (a == "--out" && i + 1 < argc) {
      o.out = argv[++i];
    } else if (a == "--count") {
      number(&o.count);
    } else if (a == "--hosts") {
      number(&o.hosts);
    } else if (a == "--programs") {
      number(&o.programs);
    } else if (a == "--rebuild-every") {
      number(&o.rebuild_every);
    } else if (!a.empty() && a[0] == '-') {
      Fail("unknown option " + a);
    } else {
      o.seeds.push_back(a);
    }
  }
  if (o.out.empty() || o.seeds.empty() || o.count == 0 || o.hosts == 0 || o.programs == 0) {
    Fail(
        "usage: make_fleet_traces --out DIR --count N [--hosts H] [--programs P] "
        "[--rebuild-every K] SEED.pstrace...");
  }
  return o;
}

int Main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  std::vector<Seed> seeds;
  for (const std::string& path : o.seeds) {
    seeds.push_back(LoadSeed(path));
    for (const Frame& f : seeds.back().frames) {
      if (f.type != FrameType::kProcess) continue;
      ForEachTag(f.payload, [&](ProcessTag tag, const std::string& value) {
        if (tag == ProcessTag::kProgram) seeds.back().program = Basename(value);
      });
    }
  }
  const long n_seeds = static_cast<long>(seeds.size());
  for (long i = 0; i < o.count; ++i) {
    const Seed& seed = seeds[static_cast<size_t>(i % n_seeds)];
    // Consecutive traces, one of each seed, run together on one host.
    const long round = i / n_seeds;
    const long variant = (round / o.hosts) % o.programs;
    Identity id;
    id.host = "node-" + std::to_string(round % o.hosts);
    id.program = "/opt/fleet/" + seed.program + "-" + std::to_string(variant);
    id.pid = 100000 + static_cast<uint64_t>(i);
    id.rank = i % 8;
    id.start_shift_ns = static_cast<uint64_t>(round / o.hosts) * 1000000000ull;
    const bool rebuilt = o.rebuild_every > 0 && variant % o.rebuild_every == o.rebuild_every - 1;
    WriteOne(seed, id, rebuilt ? static_cast<uint8_t>(variant + 1) : 0, o.out + "/" + id.host);
  }
  return 0;
}

}  // namespace
}  // namespace pinshim

int main(int argc, char** argv) { return pinshim::Main(argc, argv); }
