#include "analyzer/report/trace_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <queue>

#include "analyzer/report/format.h"
#include "analyzer/report/range_crc.h"
#include "shim/core/safe_file.h"
#include "shim/trace/crc32c.h"

namespace pinshim {
namespace report {

using trace::GetSigned;
using trace::GetVarint;

namespace {

// Frame types a resynchronising scan accepts; anything else at a candidate
// offset is taken for garbage, which keeps resynchronisation fast.
constexpr uint8_t kMaxResyncFrameType = 32;

// Traces are read whole into memory; a larger file is refused.
constexpr uint64_t kMaxTraceBytes = uint64_t{64} << 30;

// A small file of /proc, read without blocking; "" when unreadable.
std::string ReadProcFile(const std::string& path) {
  const int fd = OpenRegularForRead(path.c_str(), uint64_t{1} << 20, nullptr);
  if (fd < 0) return "";
  char buf[8192];
  const long n = ReadUpTo(fd, buf, sizeof(buf) - 1);
  close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// 1 when the process that wrote the trace still runs on this machine, 0 when
// it is gone (no such pid, or a pid started after the trace did: recycled),
// -1 when that cannot be told (another host, no /proc, no start time).
int WriterRunning(const ProcessInfo& p) {
  char host[256] = {};
  if (p.pid == 0 || p.start_realtime_ns == 0 || gethostname(host, sizeof(host) - 1) != 0 ||
      p.hostname != host) {
    return -1;
  }
  const std::string stat = ReadProcFile("/proc/" + std::to_string(p.pid) + "/stat");
  if (stat.empty()) return access("/proc/self/stat", R_OK) == 0 ? 0 : -1;
  // Field 22, start time in clock ticks after boot, counted after the
  // command's closing parenthesis (the command may hold spaces).
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  const char* q = stat.c_str() + paren + 1;
  unsigned long long ticks = 0;
  for (int field = 3; field <= 22 && *q != '\0'; ++field) {
    while (*q == ' ') ++q;
    if (field == 22) ticks = strtoull(q, nullptr, 10);
    while (*q != ' ' && *q != '\0') ++q;
  }
  const std::string proc_stat = ReadProcFile("/proc/stat");
  const size_t btime = proc_stat.find("\nbtime ");
  const long hz = sysconf(_SC_CLK_TCK);
  if (ticks == 0 || btime == std::string::npos || hz <= 0) return -1;
  const double boot_s = strtod(proc_stat.c_str() + btime + 7, nullptr);
  const double started_s = boot_s + static_cast<double>(ticks) / static_cast<double>(hz);
  // The traced process started no later than its trace (give or take the
  // clocks' granularity); a later start is another process with its pid.
  return started_s <= static_cast<double>(p.start_realtime_ns) * 1e-9 + 2.0 ? 1 : 0;
}

bool GetString(const uint8_t** p, const uint8_t* end, std::string* out) {
  uint64_t n;
  const uint8_t* q = *p;
  if (!GetVarint(&q, end, &n) || n > static_cast<uint64_t>(end - q)) return false;
  out->assign(reinterpret_cast<const char*>(q), static_cast<size_t>(n));
  *p = q + n;
  return true;
}

// The process record's fields by kind: unsigned numbers, flags (0 or 1) and
// texts go where these tables say; the others are decoded one by one
// (SetProcessField).
constexpr struct {
  trace::ProcessTag tag;
  uint64_t ProcessInfo::*field;
} kProcessNumbers[] = {
    {trace::ProcessTag::kPid, &ProcessInfo::pid},
    {trace::ProcessTag::kParentPid, &ProcessInfo::parent_pid},
    {trace::ProcessTag::kForkedFrom, &ProcessInfo::forked_from},
    {trace::ProcessTag::kStartMonotonicNs, &ProcessInfo::start_monotonic_ns},
    {trace::ProcessTag::kStartRealtimeNs, &ProcessInfo::start_realtime_ns},
    {trace::ProcessTag::kPhysicalBytes, &ProcessInfo::physical_bytes},
    {trace::ProcessTag::kMemlockLimit, &ProcessInfo::memlock_limit},
    {trace::ProcessTag::kSwapTotalBytes, &ProcessInfo::swap_total_bytes},
    {trace::ProcessTag::kSampleMs, &ProcessInfo::sample_ms},
    {trace::ProcessTag::kStackDepth, &ProcessInfo::stack_depth},
    {trace::ProcessTag::kBudgetBytes, &ProcessInfo::budget_bytes},
};
constexpr struct {
  trace::ProcessTag tag;
  bool ProcessInfo::*field;
} kProcessFlags[] = {
    {trace::ProcessTag::kWcGuard, &ProcessInfo::wc_guard},
    {trace::ProcessTag::kPythonFrames, &ProcessInfo::python_frames},
    {trace::ProcessTag::kCopyGuard, &ProcessInfo::copy_guard},
};
constexpr struct {
  trace::ProcessTag tag;
  std::string ProcessInfo::*field;
} kProcessTexts[] = {
    {trace::ProcessTag::kProgram, &ProcessInfo::program},
    {trace::ProcessTag::kHostname, &ProcessInfo::hostname},
    {trace::ProcessTag::kMode, &ProcessInfo::mode},
    {trace::ProcessTag::kVersion, &ProcessInfo::version},
    {trace::ProcessTag::kPython, &ProcessInfo::python},
};

// Sets the field of *info that one of the tables gives tag; false when none
// does. A number or flag is set only when the value is one (has_u).
bool SetTabledProcessField(trace::ProcessTag tag, const std::string& text, bool has_u, uint64_t u,
                           ProcessInfo* info) {
  bool known = false;
  for (const auto& f : kProcessNumbers) {
    if (f.tag == tag) {
      if (has_u) info->*f.field = u;
      known = true;
    }
  }
  for (const auto& f : kProcessFlags) {
    if (f.tag == tag) {
      if (has_u) info->*f.field = u != 0;
      known = true;
    }
  }
  for (const auto& f : kProcessTexts) {
    if (f.tag == tag) {
      info->*f.field = text;
      known = true;
    }
  }
  return known;
}

// The command line's arguments, written NUL-separated.
std::vector<std::string> SplitCommandLine(const std::string& text) {
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\0') {
      args.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return args;
}

// Sets the field of *info that tag names from its value: the text, or the
// unsigned number in it (u, when has_u). A tag it does not know is a newer
// writer's field, left alone.
void SetProcessField(trace::ProcessTag tag, const std::string& text, bool has_u, uint64_t u,
                     ProcessInfo* info) {
  if (SetTabledProcessField(tag, text, has_u, u, info)) return;
  switch (tag) {
    case trace::ProcessTag::kCommandLine: info->command_line = SplitCommandLine(text); break;
    case trace::ProcessTag::kRank:
      if (has_u) info->rank = trace::UnZigZag(u);
      break;
    case trace::ProcessTag::kPageSize:
      if (has_u && u) info->page_size = u;
      break;
    default: break;  // a newer writer's field
  }
}

}  // namespace

TraceReader::~TraceReader() = default;

bool TraceReader::Open(const std::string& path, std::string* error) {
  path_ = path;
  // Without blocking on a FIFO or a device, and read into memory rather than
  // mapped, so that a file truncated while it is read only ends early.
  FileFacts facts;
  const int fd = OpenRegularForRead(path.c_str(), kMaxTraceBytes, &facts);
  if (fd < 0) {
    *error = path + ": cannot open: " + SafeFileReason(-fd);
    if (-fd == kFileTooLarge) *error += " (" + FormatBytes(kMaxTraceBytes) + " at most)";
    return false;
  }
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  const int64_t now_ns = static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
  damage_.seconds_since_modified = static_cast<double>(now_ns - facts.mtime_ns) * 1e-9;
  size_t size = static_cast<size_t>(facts.size);
  if (size > 0) {
    owned_.reset(new (std::nothrow) uint8_t[size]);
    if (owned_ == nullptr) {
      *error = path + ": not enough memory to read its " + FormatBytes(size);
      close(fd);
      return false;
    }
    const long got = ReadUpTo(fd, owned_.get(), size);
    if (got < 0) {
      *error = path + ": cannot read: " + SafeFileReason(static_cast<int>(-got));
      close(fd);
      return false;
    }
    size = static_cast<size_t>(got);  // shorter when truncated meanwhile
    data_ = owned_.get();
  }
  close(fd);
  size_ = size;
  if (!Scan(error)) {
    *error = path + ": " + *error;
    return false;
  }
  if (!damage_.has_end && has_process_) damage_.writer_running = WriterRunning(process_);
  return true;
}

bool TraceReader::OpenBuffer(const uint8_t* data, size_t size, std::string* error) {
  data_ = data;
  size_ = size;
  return Scan(error);
}

bool TraceReader::Scan(std::string* error) {
  damage_.file_bytes = size_;
  if (size_ == 0) {
    *error = "empty file: the process did not start tracing, or was killed at once";
    return false;
  }
  if (size_ < sizeof(trace::kTraceMagic) ||
      memcmp(data_, trace::kTraceMagic, sizeof(trace::kTraceMagic)) != 0) {
    *error = "not a pinshim trace (no PINSHIMT header)";
    return false;
  }
  if (size_ < trace::kFileHeaderBytes) {
    *error = "truncated in its header (" + std::to_string(size_) + " bytes)";
    return false;
  }
  uint16_t version = trace::LoadU16(data_ + 8);
  if (version != trace::kTraceVersion) {
    *error = "trace format version " + std::to_string(version) +
             ", but this pinshim reads version " + std::to_string(trace::kTraceVersion) +
             "; use the pinshim that wrote it";
    return false;
  }
  uint16_t header_bytes = trace::LoadU16(data_ + 10);
  if (trace::UnmaskCrc(trace::LoadU32(data_ + 28)) != trace::Crc32c(data_, 28)) {
    damage_.header_crc_bad = true;
  }
  if (header_bytes < trace::kFileHeaderBytes || header_bytes > size_) {
    header_bytes = static_cast<uint16_t>(trace::kFileHeaderBytes);
    damage_.header_crc_bad = true;
  }

  // Every frame check, including the resynchronising scan's at every offset
  // of a damaged region, checksums through one RangeCrc: the scan's work is
  // linear in the file on any bytes (range_crc.h).
  RangeCrc crc(data_, size_);
  uint64_t pos = header_bytes;
  while (pos < size_) {
    if (FrameAt(pos, false, &crc)) {
      uint32_t len = trace::LoadU32(data_ + pos + 4);
      const uint8_t* payload = data_ + pos + trace::kFrameHeaderBytes;
      HandleFrame(data_[pos + 8], payload, payload + len, pos);
      pos += trace::kFrameHeaderBytes + len;
      continue;
    }
    // Damage: find the next frame that checks out.
    uint64_t start = pos;
    uint64_t next = pos + 1;
    while (next < size_ && !FrameAt(next, true, &crc)) ++next;
    uint64_t lost = next - start;
    if (damage_.skipped_regions == 0) damage_.first_bad_offset = start;
    ++damage_.skipped_regions;
    damage_.skipped_bytes += lost;
    if (next >= size_) {
      damage_.torn_tail_bytes = lost;
      break;
    }
    pos = next;
  }
  std::sort(batches_.begin(), batches_.end(), [](const Batch& a, const Batch& b) {
    return a.first_ns != b.first_ns ? a.first_ns < b.first_ns : a.offset < b.offset;
  });
  return true;
}

bool TraceReader::FrameAt(uint64_t pos, bool resync, RangeCrc* crc) const {
  if (size_ - pos < trace::kFrameHeaderBytes) return false;
  uint32_t len = trace::LoadU32(data_ + pos + 4);
  uint8_t type = data_[pos + 8];
  if (len > trace::kMaxFramePayload || len > size_ - pos - trace::kFrameHeaderBytes) return false;
  if (type == 0 || (resync && type > kMaxResyncFrameType)) return false;
  const uint64_t begin = pos + 8;  // the type byte, then the payload
  return crc->Crc(begin, begin + 1 + len) == trace::UnmaskCrc(trace::LoadU32(data_ + pos));
}

void TraceReader::HandleFrame(uint8_t type, const uint8_t* p, const uint8_t* end, uint64_t offset) {
  switch (static_cast<trace::FrameType>(type)) {
    case trace::FrameType::kProcess: ParseProcess(p, end); break;
    case trace::FrameType::kApiNames: ParseApiNames(p, end); break;
    case trace::FrameType::kModules: ParseModules(p, end); break;
    case trace::FrameType::kStack: ParseStack(p, end); break;
    case trace::FrameType::kPythonCode: ParsePythonCode(p, end); break;
    case trace::FrameType::kEvents: ParseBatch(p, end, offset); break;
    case trace::FrameType::kSiteTotals: ParseSiteTotals(p, end); break;
    case trace::FrameType::kEnd: {
      uint64_t dropped = 0, overflow = 0, t = 0;
      if (GetVarint(&p, end, &dropped) && GetVarint(&p, end, &overflow) && GetVarint(&p, end, &t)) {
        damage_.has_end = true;
        damage_.end_ns = t;
        damage_.stacks_not_stored = overflow;
        if (dropped > damage_.dropped_events) damage_.dropped_events = dropped;
      } else {
        ++damage_.bad_events;
      }
      break;
    }
    default: ++damage_.unknown_frames;
  }
}

void TraceReader::ParseProcess(const uint8_t* p, const uint8_t* end) {
  has_process_ = true;
  while (p < end) {
    uint64_t tag, len;
    if (!GetVarint(&p, end, &tag) || !GetVarint(&p, end, &len) ||
        len > static_cast<uint64_t>(end - p)) {
      ++damage_.bad_events;
      return;
    }
    const uint8_t* v = p;
    const uint8_t* vend = p + len;
    p = vend;
    if (tag > UINT8_MAX) continue;  // no tag of this version: a newer writer's field
    const std::string text(reinterpret_cast<const char*>(v), static_cast<size_t>(len));
    uint64_t u = 0;
    const bool has_u = GetVarint(&v, vend, &u);
    SetProcessField(static_cast<trace::ProcessTag>(tag), text, has_u, u, &process_);
  }
}

void TraceReader::ParsePythonCode(const uint8_t* p, const uint8_t* end) {
  uint64_t id, first_line;
  PythonCode c;
  if (!GetVarint(&p, end, &id) || id == 0 || id > UINT32_MAX || !GetString(&p, end, &c.file) ||
      !GetString(&p, end, &c.function) || !GetVarint(&p, end, &first_line) ||
      c.file.size() > trace::kMaxPythonTextBytes ||
      c.function.size() > trace::kMaxPythonTextBytes) {
    ++damage_.bad_events;
    return;
  }
  c.first_line = static_cast<uint32_t>(first_line > UINT32_MAX ? 0 : first_line);
  python_codes_[static_cast<uint32_t>(id)] = std::move(c);
}

const PythonCode* TraceReader::FindPythonCode(uint32_t id) const {
  auto it = python_codes_.find(id);
  return it == python_codes_.end() ? nullptr : &it->second;
}

void TraceReader::ParseApiNames(const uint8_t* p, const uint8_t* end) {
  uint64_t count;
  if (!GetVarint(&p, end, &count)) return;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t id;
    std::string name;
    if (!GetVarint(&p, end, &id) || !GetString(&p, end, &name)) {
      ++damage_.bad_events;
      return;
    }
    api_names_[static_cast<uint32_t>(id)] = name;
  }
}

void TraceReader::ParseModules(const uint8_t* p, const uint8_t* end) {
  ModuleMap map;
  uint64_t gen, count;
  if (!GetVarint(&p, end, &gen) || !GetVarint(&p, end, &count)) {
    ++damage_.bad_events;
    return;
  }
  map.generation = static_cast<uint32_t>(gen);
  for (uint64_t i = 0; i < count && p < end; ++i) {
    Module m;
    uint64_t bias, flags, nseg;
    if (!GetString(&p, end, &m.path) || !GetString(&p, end, &m.build_id) ||
        !GetVarint(&p, end, &bias) || !GetVarint(&p, end, &flags) || !GetVarint(&p, end, &nseg) ||
        nseg > static_cast<uint64_t>(end - p)) {
      ++damage_.bad_events;
      break;
    }
    m.bias = bias;
    m.flags = static_cast<uint32_t>(flags);
    for (uint64_t s = 0; s < nseg; ++s) {
      uint64_t start, len;
      if (!GetVarint(&p, end, &start) || !GetVarint(&p, end, &len)) {
        ++damage_.bad_events;
        break;
      }
      m.segments.push_back(Segment{start, len});
    }
    map.modules.push_back(std::move(m));
  }
  module_maps_.push_back(std::move(map));
}

void TraceReader::ParseStack(const uint8_t* p, const uint8_t* end) {
  uint64_t id, gen, depth, mask;
  if (!GetVarint(&p, end, &id) || !GetVarint(&p, end, &gen) || !GetVarint(&p, end, &depth) ||
      !GetVarint(&p, end, &mask) || id == 0 || id > kMaxStackId ||
      depth > static_cast<uint64_t>(trace::kMaxStackDepth)) {
    ++damage_.bad_events;
    return;
  }
  Stack s;
  s.generation = static_cast<uint32_t>(gen);
  s.exact_mask = mask;
  uint64_t ip = 0;
  for (uint64_t i = 0; i < depth; ++i) {
    if (i == 0) {
      if (!GetVarint(&p, end, &ip)) break;
    } else {
      int64_t d;
      if (!GetSigned(&p, end, &d)) break;
      ip += static_cast<uint64_t>(d);
    }
    s.ips.push_back(ip);
  }
  if (s.ips.size() != depth) {
    ++damage_.bad_events;
    return;
  }
  // The Python section, when the writer appended one; a damaged one costs
  // the Python frames only.
  uint64_t status, count;
  if (p < end && GetVarint(&p, end, &status) && GetVarint(&p, end, &count) && status != 0 &&
      status <= 255 && count <= static_cast<uint64_t>(trace::kMaxPythonFrames)) {
    std::vector<PythonFrameRef> frames;
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t code, line;
      if (!GetVarint(&p, end, &code) || !GetVarint(&p, end, &line) || code > UINT32_MAX ||
          line > UINT32_MAX) {
        break;
      }
      frames.push_back(PythonFrameRef{static_cast<uint32_t>(code), static_cast<uint32_t>(line)});
    }
    uint64_t omitted = 0;
    if (frames.size() == count && GetVarint(&p, end, &omitted)) {
      s.python_status = static_cast<trace::PythonStatus>(status);
      s.python = std::move(frames);
      s.python_omitted = omitted;
    } else {
      ++damage_.bad_events;
    }
  }
  uint32_t key = static_cast<uint32_t>(id);
  if (key > max_stack_id_) max_stack_id_ = key;
  stacks_[key] = std::move(s);
}

void TraceReader::ParseBatch(const uint8_t* p, const uint8_t* end, uint64_t offset) {
  uint64_t tid, first, last, count;
  const uint8_t* start = p;
  if (!GetVarint(&p, end, &tid) || !GetVarint(&p, end, &first) || !GetVarint(&p, end, &last) ||
      !GetVarint(&p, end, &count)) {
    ++damage_.bad_events;
    return;
  }
  Batch b;
  b.offset = offset + trace::kFrameHeaderBytes + static_cast<uint64_t>(p - start);
  b.length = static_cast<uint64_t>(end - p);
  b.tid = static_cast<uint32_t>(tid);
  // Every event takes at least three bytes: a count beyond that is damage.
  b.count = static_cast<uint32_t>(std::min<uint64_t>(count, b.length / 3));
  b.first_ns = first;
  b.last_ns = last < first ? first : last;
  if (b.count == 0) return;
  if (batches_.empty() || first < first_ns_) first_ns_ = first;
  if (b.last_ns > last_ns_) last_ns_ = b.last_ns;
  event_count_ += b.count;
  batches_.push_back(b);
}

// The frame of the highest sequence wins (trace_format.h); a damaged one is
// skipped whole, so totals are never half of one snapshot.
void TraceReader::ParseSiteTotals(const uint8_t* p, const uint8_t* end) {
  SiteTotals t;
  uint64_t len = 0, count = 0;
  if (!GetVarint(&p, end, &len) || len > static_cast<uint64_t>(end - p) ||
      !trace::GetFields(p, p + len, &t.header)) {
    ++damage_.bad_events;
    return;
  }
  p += len;
  // Every cell takes at least two bytes: a count beyond that is damage.
  if (!GetVarint(&p, end, &count) || count > static_cast<uint64_t>(end - p) / 2) {
    ++damage_.bad_events;
    return;
  }
  t.cells.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    trace::SiteCellFields c;
    if (!GetVarint(&p, end, &len) || len > static_cast<uint64_t>(end - p) ||
        !trace::GetFields(p, p + len, &c) ||
        (c.kinds & 7) >= static_cast<uint64_t>(MemKind::kCount) ||
        ((c.kinds >> 3) & 7) >= static_cast<uint64_t>(MemKind::kCount)) {
      ++damage_.bad_events;
      return;
    }
    if (c.stack > kMaxStackId) c.stack = 0;
    p += len;
    t.cells.push_back(c);
  }
  if (has_totals_ && t.header.sequence < totals_.header.sequence) return;
  totals_ = std::move(t);
  has_totals_ = true;
}

const Stack* TraceReader::FindStack(uint32_t id) const {
  auto it = stacks_.find(id);
  return it == stacks_.end() ? nullptr : &it->second;
}

const Module* TraceReader::ModuleAt(uint32_t generation, uint64_t ip) const {
  auto covers = [ip](const ModuleMap& map) -> const Module* {
    for (const Module& m : map.modules) {
      for (const Segment& s : m.segments) {
        if (ip >= s.start && ip - s.start < s.length) return &m;
      }
    }
    return nullptr;
  };
  // The map in force when the stack was first seen; failing that, a later
  // one (a module loaded just before its map was written), then any.
  for (const ModuleMap& map : module_maps_) {
    if (map.generation == generation) {
      if (const Module* m = covers(map)) return m;
    }
  }
  for (const ModuleMap& map : module_maps_) {
    if (map.generation > generation) {
      if (const Module* m = covers(map)) return m;
    }
  }
  for (auto it = module_maps_.rbegin(); it != module_maps_.rend(); ++it) {
    if (const Module* m = covers(*it)) return m;
  }
  return nullptr;
}

const std::string& TraceReader::ApiName(uint32_t api) const {
  static const std::string kEmpty;
  auto it = api_names_.find(api);
  return it == api_names_.end() ? kEmpty : it->second;
}

namespace {

// Decodes the events of one batch, keeping the batch's delta state.
class BatchCursor {
 public:
  BatchCursor(const uint8_t* p, const uint8_t* end, uint32_t tid, uint32_t count, uint64_t first_ns)
      : p_(p), end_(end), remaining_(count), prev_time_(first_ns) {
    event_.tid = tid;
  }

  // Advances to the next known event; false at the end of the batch.
  bool Next(uint64_t* bad, uint64_t* unknown) {
    while (remaining_ > 0 && p_ < end_) {
      --remaining_;
      uint8_t type = *p_++;
      uint64_t len;
      if (!GetVarint(&p_, end_, &len) || len > static_cast<uint64_t>(end_ - p_)) {
        ++*bad;
        p_ = end_;
        return false;
      }
      const uint8_t* q = p_;
      const uint8_t* qend = p_ + len;
      p_ = qend;
      int r = Decode(type, q, qend);
      if (r > 0) return true;
      if (r < 0)
        ++*bad;
      else
        ++*unknown;
    }
    return false;
  }

  const Event& event() const { return event_; }

 private:
  // Stack ids beyond kMaxStackId are taken for none.
  static uint32_t StackId(uint64_t id) { return id > kMaxStackId ? 0 : static_cast<uint32_t>(id); }

  // 1: decoded, 0: unknown type, -1: malformed. A switch of one-line
  // cases, one per event type, each decoder reading its type's field list.
  int Decode(uint8_t type, const uint8_t* q, const uint8_t* end) {
    int64_t dt;
    if (!GetSigned(&q, end, &dt)) return -1;
    const uint64_t time = prev_time_ + static_cast<uint64_t>(dt);
    bool ok;
    using trace::EventType;
    switch (static_cast<EventType>(type)) {
      case EventType::kCopy: ok = Copy(q, end); break;
      case EventType::kPin: ok = Pin(q, end); break;
      case EventType::kHostAlloc: ok = HostAlloc(q, end); break;
      case EventType::kMisuse: ok = Misuse(q, end); break;
      case EventType::kSample: ok = Sample(q, end); break;
      case EventType::kSync: ok = Sync(q, end); break;
      case EventType::kStream: ok = Stream(q, end); break;
      case EventType::kGraph: ok = Graph(q, end); break;
      case EventType::kBudgetDecision: ok = BudgetDecision(q, end); break;
      case EventType::kOwnPin: ok = OwnPin(q, end); break;
      case EventType::kPathVerdict: ok = PathVerdict(q, end); break;
      case EventType::kOptimizeCounters: ok = Counters(q, end); break;
      case EventType::kDropped: ok = Dropped(q, end); break;
      default: prev_time_ = time; return 0;
    }
    if (!ok) return -1;  // the time base stays that of the last good event
    prev_time_ = time;
    event_.type = static_cast<EventType>(type);
    event_.time_ns = time;
    return 1;
  }

  // Each reads one event type's fields into event_; false when malformed.
  // Fields an event type does not have are set as Event says (zero).
  bool Copy(const uint8_t* q, const uint8_t* end) {
    trace::CopyFields f;
    if (!trace::GetFields(q, end, &f)) return false;
    const uint64_t src = f.kinds & 7, dst = (f.kinds >> 3) & 7;
    const uint64_t kinds = static_cast<uint64_t>(MemKind::kCount);
    if (src >= kinds || dst >= kinds) return false;
    Event& e = event_;
    e.duration_ns = f.duration_ns;
    e.api = static_cast<uint32_t>(f.api);
    e.dir = static_cast<CopyDir>(f.bits & trace::kCopyDirMask);
    e.async = (f.bits & trace::kCopyAsync) != 0;
    e.src = static_cast<MemKind>(src);
    e.dst = static_cast<MemKind>(dst);
    e.bytes = f.bytes;
    e.stack = StackId(f.stack);
    e.stream = prev_stream_ += static_cast<uint64_t>(f.stream);
    e.host_ptr = prev_host_ptr_ += static_cast<uint64_t>(f.host_ptr);
    e.alloc_id = prev_alloc_id_ += static_cast<uint64_t>(f.alloc_id);
    e.host_flags = static_cast<uint32_t>(f.host_flags);
    e.result = static_cast<int32_t>(f.result);
    if (f.bits & trace::kCopyHasDevice) prev_device_ = static_cast<int32_t>(f.device);
    e.device = prev_device_;
    e.staged_workers = static_cast<uint32_t>(f.staged_workers);
    e.staged_chunk_bytes = f.staged_chunk_bytes;
    return true;
  }

  bool Pin(const uint8_t* q, const uint8_t* end) {
    trace::PinFields f;
    if (!trace::GetFields(q, end, &f) || f.op > 3) return false;
    Event& e = event_;
    e.duration_ns = f.duration_ns;
    e.api = static_cast<uint32_t>(f.api);
    e.op = static_cast<PinOp>(f.op);
    e.ptr = f.ptr;
    e.bytes = f.bytes;
    e.flags = static_cast<uint32_t>(f.flags);
    e.stack = StackId(f.stack);
    e.result = static_cast<int32_t>(f.result);
    e.device = static_cast<int32_t>(f.device);
    return true;
  }

  bool HostAlloc(const uint8_t* q, const uint8_t* end) {
    trace::HostAllocFields f;
    if (!trace::GetFields(q, end, &f)) return false;
    Event& e = event_;
    e.duration_ns = 0;
    e.alloc_id = f.alloc_id;
    e.ptr = f.ptr;
    e.bytes = f.bytes;
    e.is_free = (f.bits & 1) != 0;
    e.source = static_cast<uint8_t>(f.bits >> 1);
    e.stack = StackId(f.stack);
    return true;
  }

  bool Misuse(const uint8_t* q, const uint8_t* end) {
    trace::MisuseFields f;
    if (!trace::GetFields(q, end, &f)) return false;
    Event& e = event_;
    e.duration_ns = 0;
    e.misuse = static_cast<trace::MisuseKind>(f.kind);
    e.ptr = f.ptr;
    e.bytes = f.bytes;
    e.stack = StackId(f.stack);
    e.detail = static_cast<uint32_t>(f.detail);
    return true;
  }

  bool Sample(const uint8_t* q, const uint8_t* end) {
    trace::SampleFields f;
    if (!trace::GetFields(q, end, &f)) return false;
    event_.duration_ns = 0;
#define PINSHIM_SAMPLE_FIELD(name, type, layout, absent) event_.name = f.name;
    PINSHIM_SAMPLE_FIELDS(PINSHIM_SAMPLE_FIELD)
#undef PINSHIM_SAMPLE_FIELD
    return true;
  }

  bool Sync(const uint8_t* q, const uint8_t* end) {
    trace::SyncFields f;
    if (!trace::GetFields(q, end, &f)) return false;
    Event& e = event_;
    e.duration_ns = f.duration_ns;
    e.api = static_cast<uint32_t>(f.api);
    e.sync = static_cast<trace::SyncKind>(f.kind);
    e.stream = prev_sync_stream_ += static_cast<uint64_t>(f.stream);
    e.event_handle = f.event;
    e.result = static_cast<int32_t>(f.result);
    e.device = static_cast<int32_t>(f.device);  // -1 in traces older than the field
    return true;
  }

  bool Stream(const uint8_t* q, const uint8_t* end) {
    trace::StreamFields f;
    if (!trace::GetFields(q, end, &f)) return false;
    Event& e = event_;
    e.duration_ns = f.duration_ns;
    e.api = static_cast<uint32_t>(f.api);
    e.stream = f.stream;
    e.flags = static_cast<uint32_t>(f.flags);
    e.priority = static_cast<int32_t>(f.priority);
    e.result = static_cast<int32_t>(f.result);
    e.device = static_cast<int32_t>(f.device);
    e.stack = 0;
    return true;
  }

  bool Graph(const uint8_t* q, const uint8_t* end) {
    trace::GraphFields f;
    if (!trace::GetFields(q, end, &f) || f.op > 255) return false;
    Event& e = event_;
    e.duration_ns = f.duration_ns;
    e.api = static_cast<uint32_t>(f.api);
    e.graph_op = static_cast<trace::GraphOp>(f.op);
    e.stream = f.stream;
    e.graph_handle = f.graph;
    e.result = static_cast<int32_t>(f.result);
    e.device = static_cast<int32_t>(f.device);
    e.stack = 0;
    return true;
  }

  // Owners, decisions and limiters this reader cannot name are kept (a
  // newer writer may add some); the report calls them "unknown".
  bool BudgetDecision(const uint8_t* q, const uint8_t* end) {
    trace::BudgetDecisionFields f;
    if (!trace::GetFields(q, end, &f)) return false;
    if (f.owner > 255 || f.decision > 255 || f.limiter > 255) return false;
    Event& e = event_;
    e.duration_ns = 0;
    e.budget_owner = static_cast<trace::BudgetOwner>(f.owner);
    e.budget_decision = static_cast<trace::BudgetDecision>(f.decision);
    e.budget_limiter = static_cast<trace::BudgetLimiter>(f.limiter);
    e.evictor_called = (f.evictor_called & trace::kBudgetEvictorCalled) != 0;
    e.bytes = f.bytes;
    e.evicted_bytes = f.evicted_bytes;
    e.process_pinned = f.process_pinned;
    e.process_budget = f.process_budget;
    e.node_pinned = f.node_pinned;
    e.node_budget = f.node_budget;
    e.stack = StackId(f.stack);
    return true;
  }

  bool OwnPin(const uint8_t* q, const uint8_t* end) {
    trace::OwnPinFields f;  // stack and detail: 0 in traces older than them
    if (!trace::GetFields(q, end, &f) || f.action > 255 || f.part > 255 || f.reason > 255) {
      return false;
    }
    Event& e = event_;
    e.duration_ns = 0;
    e.own_action = static_cast<OwnPinAction>(f.action);
    e.own_part = static_cast<OwnPinPart>(f.part);
    e.own_reason = static_cast<OwnPinReason>(f.reason);
    e.ptr = f.ptr;
    e.bytes = f.bytes;
    e.alloc_id = f.alloc_id;
    e.result = static_cast<int32_t>(f.result);
    e.stack = StackId(f.stack);
    e.own_detail = static_cast<uint32_t>(f.detail);
    return true;
  }

  bool PathVerdict(const uint8_t* q, const uint8_t* end) {
    trace::PathVerdictFields f;
    if (!trace::GetFields(q, end, &f)) return false;
    event_.duration_ns = 0;
    event_.stack = 0;
    event_.verdict = f;
    return true;
  }

  bool Counters(const uint8_t* q, const uint8_t* end) {
    OptimizeCountersEvent c{};
    if (!trace::GetFields(q, end, &c)) return false;
    event_.duration_ns = 0;
    event_.stack = 0;
    event_.counters = c;
    return true;
  }

  bool Dropped(const uint8_t* q, const uint8_t* end) {
    trace::DroppedFields f;
    if (!trace::GetFields(q, end, &f)) return false;
    event_.duration_ns = 0;
    event_.dropped = f.count;
    return true;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  uint32_t remaining_;
  uint64_t prev_time_;
  uint64_t prev_stream_ = 0;
  uint64_t prev_host_ptr_ = 0;
  uint64_t prev_alloc_id_ = 0;
  uint64_t prev_sync_stream_ = 0;
  int32_t prev_device_ = -1;
  Event event_;
};

}  // namespace

void TraceReader::ForEachEvent(EventVisitor* visitor) const {
  uint64_t bad = 0, unknown = 0, dropped = 0;
  // Min-heap of open cursors by (next event time, batch order).
  struct Open {
    uint64_t time;
    size_t order;
    BatchCursor* cursor;
  };
  auto later = [](const Open& a, const Open& b) {
    return a.time != b.time ? a.time > b.time : a.order > b.order;
  };
  std::priority_queue<Open, std::vector<Open>, decltype(later)> heap(later);
  std::vector<std::unique_ptr<BatchCursor>> owned;
  std::vector<BatchCursor*> spare;
  size_t next = 0;
  auto visit = [&](const Event& e) {
    if (e.type == trace::EventType::kDropped) dropped += e.dropped;
    visitor->OnEvent(e);
  };
  while (next < batches_.size() || !heap.empty()) {
    // Open every batch that may hold an event before the earliest open one.
    while (next < batches_.size() && (heap.empty() || batches_[next].first_ns <= heap.top().time)) {
      const Batch& b = batches_[next];
      BatchCursor* c;
      const uint8_t* p = data_ + b.offset;
      if (!spare.empty()) {
        c = spare.back();
        spare.pop_back();
        *c = BatchCursor(p, p + b.length, b.tid, b.count, b.first_ns);
      } else {
        owned.push_back(std::make_unique<BatchCursor>(p, p + b.length, b.tid, b.count, b.first_ns));
        c = owned.back().get();
      }
      if (c->Next(&bad, &unknown)) {
        heap.push(Open{c->event().time_ns, next, c});
      } else {
        spare.push_back(c);
      }
      ++next;
    }
    if (heap.empty()) continue;
    Open top = heap.top();
    heap.pop();
    visit(top.cursor->event());
    // While this batch stays the earliest, go on without the heap.
    for (;;) {
      if (!top.cursor->Next(&bad, &unknown)) {
        spare.push_back(top.cursor);
        break;
      }
      uint64_t t = top.cursor->event().time_ns;
      bool earliest = (heap.empty() || t < heap.top().time ||
                       (t == heap.top().time && top.order < heap.top().order)) &&
                      (next >= batches_.size() || t < batches_[next].first_ns);
      if (!earliest) {
        heap.push(Open{t, top.order, top.cursor});
        break;
      }
      visit(top.cursor->event());
    }
  }
  // Several passes see the same events: keep the counts of one.
  damage_.bad_events = std::max(damage_.bad_events, bad);
  damage_.unknown_events = std::max(damage_.unknown_events, unknown);
  damage_.dropped_events = std::max(damage_.dropped_events, dropped);
}

std::string TraceReader::DescribeDamage() const {
  std::string out;
  auto add = [&](const std::string& s) {
    if (!out.empty()) out += "; ";
    out += s;
  };
  if (damage_.header_crc_bad) add("the file header is damaged");
  uint64_t middle = damage_.skipped_bytes - damage_.torn_tail_bytes;
  if (middle > 0) {
    uint32_t regions = damage_.skipped_regions - (damage_.torn_tail_bytes ? 1 : 0);
    add("skipped " + FormatBytes(middle) + " of damaged data in " + std::to_string(regions) +
        (regions == 1 ? " place" : " places") + " (first at offset " +
        std::to_string(damage_.first_bad_offset) + ")");
  }
  if (damage_.torn_tail_bytes > 0) {
    add("the last " + FormatBytes(damage_.torn_tail_bytes) +
        " are an unfinished record and were skipped");
  }
  if (damage_.bad_events > 0) {
    add(std::to_string(damage_.bad_events) + " undecodable records skipped");
  }
  if (!damage_.has_end) {
    // "Still running" only when the process is seen running: a process that
    // stopped writing (killed, crashed, or its disk full) can have changed
    // the file a moment ago too.
    if (damage_.writer_running == 1) {
      add("no end record: the process (pid " + std::to_string(process_.pid) +
          ") is still running, so this report is partial");
    } else if (damage_.writer_running == 0) {
      add("no end record: the process has ended without closing its trace (it was killed or "
          "crashed, or the trace could not be written to the end, as on a full disk), so its "
          "last events are missing");
    } else if (damage_.seconds_since_modified >= 0 && damage_.seconds_since_modified < 5) {
      add("no end record and the file changed " +
          std::to_string(static_cast<int>(damage_.seconds_since_modified)) +
          " s ago: the process may still be running, or it stopped writing (killed, crashed, "
          "disk full), so this report is partial");
    } else {
      add("no end record: the process was killed or crashed, or the trace could not be written "
          "to the end (a full disk), so its last events are missing");
    }
  }
  if (damage_.dropped_events > 0) {
    add(std::to_string(damage_.dropped_events) + " events were dropped while recording");
  }
  if (damage_.stacks_not_stored > 0) {
    add(std::to_string(damage_.stacks_not_stored) +
        " call stacks were not stored (the recorder's table was full)");
  }
  return out;
}

}  // namespace report
}  // namespace pinshim
