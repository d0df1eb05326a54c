#include "analyzer/report/site_table.h"

#include <algorithm>
#include <cstdio>

#include "analyzer/report/sha256.h"

namespace pinshim {
namespace report {
namespace {

std::string Hex(const std::string& raw) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string OffsetText(uint64_t offset) {
  char buf[24];
  snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(offset));
  return buf;
}

}  // namespace

std::string ShortHash(char kind, const std::string& text) {
  const std::array<uint8_t, 32> d = Sha256(text);
  return std::string(1, kind) + Hex(std::string(reinterpret_cast<const char*>(d.data()), 8));
}

void CallSiteTable::OnCopy(const Event& e) {
  const int dir = static_cast<int>(e.dir) & 3;
  const MemKind kind = e.dir == CopyDir::kDeviceToDevice ? MemKind::kDevice : e.HostKind();
  const int k = static_cast<int>(kind);
  if (k < 0 || k >= kMemKinds) return;
  CopyCell& c = stacks_[e.stack].copy[dir][k];
  ++c.copies;
  c.call_ns += e.duration_ns;
  if (e.async) ++c.async_copies;
  if (e.result != 0) {
    ++c.failed;
    return;
  }
  c.bytes += e.bytes;
}

void CallSiteTable::AddCopies(uint32_t stack, CopyDir dir, MemKind kind, const CopyCell& counts) {
  const int k = static_cast<int>(kind);
  if (k < 0 || k >= kMemKinds) return;
  CopyCell& c = stacks_[stack].copy[static_cast<int>(dir) & 3][k];
  c.copies += counts.copies;
  c.failed += counts.failed;
  c.bytes += counts.bytes;
  c.async_copies += counts.async_copies;
  c.call_ns += counts.call_ns;
}

void CallSiteTable::OnPin(const Event& e) {
  const bool registers = e.op == PinOp::kRegister;
  if (e.op != PinOp::kAlloc && !registers) return;
  PinCell& p = stacks_[e.stack].pin;
  p.call_ns += e.duration_ns;
  if (e.result != 0) {
    ++p.failed;
    return;
  }
  ++(registers ? p.registrations : p.allocations);
  p.bytes += e.bytes;
  p.largest = std::max(p.largest, e.bytes);
}

std::string SiteKey(const Site& site, const std::string& build_id_hex) {
  if (!site.known || site.site_index < 0 ||
      site.site_index >= static_cast<int>(site.stack.size())) {
    return "";
  }
  const Frame& f = site.stack[static_cast<size_t>(site.site_index)];
  if (f.python) return ShortHash('y', f.file + ":" + std::to_string(f.line));
  // Inlined frames share their address: the site's depth among them tells
  // them apart.
  int depth = 0;
  for (int i = site.site_index - 1; i >= 0 && site.stack[static_cast<size_t>(i)].ip == f.ip; --i) {
    ++depth;
  }
  std::string where = "+" + OffsetText(f.offset) + (depth > 0 ? "#" + std::to_string(depth) : "");
  if (!build_id_hex.empty()) return ShortHash('n', build_id_hex + where);
  const size_t slash = f.module.rfind('/');
  return ShortHash('m',
                   (slash == std::string::npos ? f.module : f.module.substr(slash + 1)) + where);
}

std::string SiteBuildId(const TraceReader& trace, uint32_t stack, const Site& site) {
  if (!site.known || site.site_index < 0 ||
      site.site_index >= static_cast<int>(site.stack.size())) {
    return "";
  }
  const Frame& f = site.stack[static_cast<size_t>(site.site_index)];
  const Stack* s = trace.FindStack(stack);
  if (f.python || s == nullptr || f.ip == 0) return "";
  const Module* m = trace.ModuleAt(s->generation, f.ip);
  return m == nullptr ? "" : Hex(m->build_id);
}

void PinnedSeries::Note(uint64_t time_ns, uint64_t bytes) {
  const uint64_t since = time_ns > origin_ ? time_ns - origin_ : 0;
  while (since / width_ >= kMaxBuckets) {
    // Merge neighbours: bucket i of the doubled width is 2i and 2i+1.
    for (size_t i = 0; i < max_.size(); ++i) {
      const size_t to = i / 2;
      if (i % 2 == 0) {
        max_[to] = max_[i];
        seen_[to] = seen_[i];
      } else {
        max_[to] = std::max(max_[to], max_[i]);
        seen_[to] = seen_[to] || seen_[i];
      }
    }
    max_.resize((max_.size() + 1) / 2);
    seen_.resize(max_.size());
    width_ *= 2;
  }
  const size_t b = static_cast<size_t>(since / width_);
  if (b >= max_.size()) {
    max_.resize(b + 1, 0);
    seen_.resize(b + 1, false);
  }
  max_[b] = std::max(max_[b], bytes);
  seen_[b] = true;
}

std::vector<std::pair<uint64_t, uint64_t>> PinnedSeries::Points() const {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (size_t i = 0; i < max_.size(); ++i) {
    if (seen_[i]) out.emplace_back(i * width_, max_[i]);
  }
  return out;
}

}  // namespace report
}  // namespace pinshim
