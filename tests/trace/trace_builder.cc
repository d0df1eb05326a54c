#include "tests/trace/trace_builder.h"

#include <sys/uio.h>

#include <cstdio>

#include "shim/trace/frame_writer.h"

namespace pinshim {
namespace testing {

using trace::PutSigned;
using trace::PutVarint;

namespace {

void AddVarint(std::string* s, uint64_t v) {
  uint8_t tmp[trace::kMaxVarint];
  s->append(reinterpret_cast<char*>(tmp), PutVarint(tmp, v) - tmp);
}

void AddString(std::string* s, const std::string& v) {
  AddVarint(s, v.size());
  s->append(v);
}

void AddTlv(std::string* s, trace::ProcessTag tag, const std::string& value) {
  AddVarint(s, static_cast<uint64_t>(tag));
  AddString(s, value);
}

std::string Varint(uint64_t v) {
  std::string s;
  AddVarint(&s, v);
  return s;
}

}  // namespace

TraceBuilder::TraceBuilder() : buf_(64 * 1024) {
  uint8_t header[trace::kFileHeaderBytes];
  trace::EncodeFileHeader(header);
  out_.assign(reinterpret_cast<char*>(header), sizeof(header));
  enc_.Init(buf_.data(), buf_.size());
}

void TraceBuilder::Frame(trace::FrameType type, const std::string& payload) {
  struct iovec part = {const_cast<char*>(payload.data()), payload.size()};
  uint8_t header[trace::kFrameHeaderBytes];
  trace::EncodeFrameHeader(type, &part, 1, header);
  out_.append(reinterpret_cast<char*>(header), sizeof(header));
  out_.append(payload);
}

void TraceBuilder::Process(const BuilderProcess& p) {
  std::string s;
  AddTlv(&s, trace::ProcessTag::kPid, Varint(p.pid));
  AddTlv(&s, trace::ProcessTag::kProgram, p.program);
  AddTlv(&s, trace::ProcessTag::kCommandLine, p.program + std::string(1, '\0') + "--flag");
  AddTlv(&s, trace::ProcessTag::kHostname, "node1");
  AddTlv(&s, trace::ProcessTag::kRank, Varint(trace::ZigZag(p.rank)));
  AddTlv(&s, trace::ProcessTag::kStartMonotonicNs, Varint(p.start_ns));
  AddTlv(&s, trace::ProcessTag::kPhysicalBytes, Varint(p.physical_bytes));
  AddTlv(&s, trace::ProcessTag::kMemlockLimit, Varint(p.memlock_limit));
  AddTlv(&s, trace::ProcessTag::kBudgetBytes, Varint(p.budget_bytes));
  AddTlv(&s, trace::ProcessTag::kSampleMs, Varint(10));
  AddTlv(&s, trace::ProcessTag::kMode, p.mode);
  AddTlv(&s, trace::ProcessTag::kPageSize, Varint(p.page_size));
  Frame(trace::FrameType::kProcess, s);
}

void TraceBuilder::Modules(uint32_t generation, const std::string& path, uint64_t start,
                           uint64_t len) {
  std::string s;
  AddVarint(&s, generation);
  AddVarint(&s, 1);
  AddString(&s, path);
  AddString(&s, "");
  AddVarint(&s, 0);
  AddVarint(&s, trace::kModuleMainProgram);
  AddVarint(&s, 1);
  AddVarint(&s, start);
  AddVarint(&s, len);
  Frame(trace::FrameType::kModules, s);
}

void TraceBuilder::Modules(uint32_t generation, const std::vector<BuilderModule>& modules) {
  std::string s;
  AddVarint(&s, generation);
  AddVarint(&s, modules.size());
  for (size_t i = 0; i < modules.size(); ++i) {
    const BuilderModule& m = modules[i];
    AddString(&s, m.path);
    AddString(&s, m.build_id);
    AddVarint(&s, m.bias);
    AddVarint(&s, i == 0 ? trace::kModuleMainProgram : 0);
    AddVarint(&s, 1);
    AddVarint(&s, m.start);
    AddVarint(&s, m.length);
  }
  Frame(trace::FrameType::kModules, s);
}

namespace {

std::string StackPayload(uint32_t id, uint32_t generation, const std::vector<uint64_t>& ips);

}  // namespace

void TraceBuilder::PythonStack(uint32_t id, uint32_t generation, const std::vector<uint64_t>& ips,
                               trace::PythonStatus status,
                               const std::vector<std::pair<uint32_t, uint32_t>>& frames,
                               uint64_t omitted) {
  std::string s = StackPayload(id, generation, ips);
  AddVarint(&s, static_cast<uint8_t>(status));
  AddVarint(&s, frames.size());
  for (const auto& f : frames) {
    AddVarint(&s, f.first);
    AddVarint(&s, f.second);
  }
  AddVarint(&s, omitted);
  Frame(trace::FrameType::kStack, s);
}

void TraceBuilder::PythonCode(uint32_t id, const std::string& file, const std::string& function,
                              uint32_t first_line) {
  std::string s;
  AddVarint(&s, id);
  AddVarint(&s, file.size());
  s += file;
  AddVarint(&s, function.size());
  s += function;
  AddVarint(&s, first_line);
  Frame(trace::FrameType::kPythonCode, s);
}

namespace {

std::string StackPayload(uint32_t id, uint32_t generation, const std::vector<uint64_t>& ips) {
  std::string s;
  AddVarint(&s, id);
  AddVarint(&s, generation);
  AddVarint(&s, ips.size());
  AddVarint(&s, 0);
  for (size_t i = 0; i < ips.size(); ++i) {
    if (i == 0) {
      AddVarint(&s, ips[0]);
    } else {
      uint8_t tmp[trace::kMaxVarint];
      s.append(reinterpret_cast<char*>(tmp),
               PutSigned(tmp, static_cast<int64_t>(ips[i] - ips[i - 1])) - tmp);
    }
  }
  return s;
}

}  // namespace

void TraceBuilder::Stack(uint32_t id, uint32_t generation, const std::vector<uint64_t>& ips) {
  Frame(trace::FrameType::kStack, StackPayload(id, generation, ips));
}

void TraceBuilder::ApiNames(const std::vector<std::pair<uint32_t, std::string>>& names) {
  std::string s;
  AddVarint(&s, names.size());
  for (const auto& n : names) {
    AddVarint(&s, n.first);
    AddString(&s, n.second);
  }
  Frame(trace::FrameType::kApiNames, s);
}

void TraceBuilder::End(uint64_t end_ns) {
  std::string s;
  AddVarint(&s, 0);
  AddVarint(&s, 0);
  AddVarint(&s, end_ns);
  Frame(trace::FrameType::kEnd, s);
}

void TraceBuilder::Flush(uint32_t tid) {
  if (enc_.count() == 0) return;
  uint8_t header[trace::kMaxBatchHeaderBytes];
  size_t n = enc_.EncodeHeader(tid, header);
  std::string s(reinterpret_cast<char*>(header), n);
  s.append(reinterpret_cast<const char*>(enc_.data()), enc_.size());
  Frame(trace::FrameType::kEvents, s);
  enc_.Reset();
}

bool TraceBuilder::WriteTo(const std::string& path) const {
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = fwrite(out_.data(), 1, out_.size(), f) == out_.size();
  return fclose(f) == 0 && ok;
}

}  // namespace testing
}  // namespace pinshim
