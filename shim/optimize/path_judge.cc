#include "shim/optimize/path_judge.h"

namespace pinshim {
namespace optimize {
namespace {

// A figure is the middle of its recent samples (ps per byte): one copy
// slowed by something else (a page fault storm, a descheduled thread)
// moves it less than it would move a mean.
constexpr int kRecent = PathJudge::kRecent;

uint32_t PsPerByte(uint64_t bytes, uint64_t ns) {
  const uint64_t ps = ns * 1000 / bytes;
  return ps > UINT32_MAX ? UINT32_MAX : ps == 0 ? 1 : static_cast<uint32_t>(ps);
}

// Cost-model wins at or above this let a path go before the driver's
// first figure: one driver copy there costs more than the path's setup.
constexpr double kSkipDriverFirst = 4.0;

}  // namespace

const char* PathJudge::ClassName(int size_class) {
  static const char* const kNames[kClasses] = {"0", "256K", "1M", "4M", "16M", "64M", "256M", "1G"};
  return size_class >= 0 && size_class < kClasses ? kNames[size_class] : "?";
}

uint64_t PathJudge::Figure::Value() const {
  const uint64_t n = samples.load(std::memory_order_relaxed);
  if (n == 0) return 0;
  const uint64_t stamp = n << 32;
  const uint64_t kept = middle.load(std::memory_order_relaxed);
  if ((kept & ~uint64_t{UINT32_MAX}) == stamp && (kept & UINT32_MAX) != 0) return kept & UINT32_MAX;
  const int k = n < kRecent ? static_cast<int>(n) : kRecent;
  uint32_t v[kRecent];
  for (int i = 0; i < k; ++i) v[i] = recent[i].load(std::memory_order_relaxed);
  for (int i = 1; i < k; ++i) {  // insertion sort of at most four
    for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
      const uint32_t t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  }
  const uint64_t m = k % 2 == 1 ? v[k / 2] : (uint64_t{v[k / 2 - 1]} + v[k / 2]) / 2;
  middle.store(stamp | m, std::memory_order_relaxed);
  return m;
}

void PathJudge::Figure::Clear() {
  samples.store(0, std::memory_order_relaxed);
  middle.store(0, std::memory_order_relaxed);
}

void PathJudge::Figure::Add(uint32_t ps_per_byte) {
  const uint64_t n = samples.fetch_add(1, std::memory_order_relaxed);
  recent[n % kRecent].store(ps_per_byte, std::memory_order_relaxed);
}

bool PathJudge::Probe(Cell& c, int p, uint32_t first_shift) {
  uint32_t shift = c.probe_shift[p].load(std::memory_order_relaxed);
  if (shift < first_shift) shift = first_shift;
  const uint32_t n = c.since_probe[p].fetch_add(1, std::memory_order_relaxed) + 1;
  if (n < (uint32_t{1} << shift)) return false;
  c.since_probe[p].store(0, std::memory_order_relaxed);
  const uint32_t cap = first_shift == kFirstRetryShift ? kMaxRetryShift : kMaxProbeShift;
  c.probe_shift[p].store(shift < cap ? shift + 1 : cap, std::memory_order_relaxed);
  return true;
}

bool PathJudge::Take(CopyPath path, CopyDir dir, uint64_t bytes, bool sync, double expected_win) {
  if (path == CopyPath::kDriver || !enabled_.load(std::memory_order_relaxed)) return true;
  Cell& c = cells_[IndexOf(dir, bytes, sync)];
  const int p = static_cast<int>(path);
  // Memory pinned in place cannot take the driver's pageable path for one
  // copy: its driver figure comes from other buffers' copies, and it is
  // never probed against it.
  const bool can_probe_driver = path != CopyPath::kPinnedInPlace;
  if (c.fig[0].samples.load(std::memory_order_relaxed) == 0) {
    if (expected_win < kSkipDriverFirst &&
        c.driver_overlapped.load(std::memory_order_relaxed) < kMinSamples) {
      return !can_probe_driver;
    }
    return !can_probe_driver || !Probe(c, p, kFirstProbeShift);
  }
  const auto verdict = static_cast<PathVerdict>(c.verdict[p].load(std::memory_order_relaxed));
  if (verdict == PathVerdict::kLoses) {
    if (!Probe(c, p, kFirstRetryShift)) return false;
    path_retries_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  if (verdict == PathVerdict::kUnknown || !can_probe_driver) return true;
  if (!Probe(c, p, kFirstProbeShift)) return true;
  driver_probes_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

bool PathJudge::Counts(CopyDir dir, uint64_t bytes) const {
  return bytes != 0 && (dir == CopyDir::kHostToDevice || dir == CopyDir::kDeviceToHost) &&
         enabled_.load(std::memory_order_relaxed);
}

void PathJudge::AddDriverTime(CopyDir dir, uint64_t ns) {
  driver_ns_[dir == CopyDir::kDeviceToHost ? 1 : 0].fetch_add(ns, std::memory_order_relaxed);
}

void PathJudge::Record(CopyPath path, CopyDir dir, uint64_t bytes, bool sync, uint64_t ns) {
  if (!Counts(dir, bytes)) return;
  const int index = IndexOf(dir, bytes, sync);
  Cell& c = cells_[index];
  const int p = static_cast<int>(path);
  c.fig[p].Add(PsPerByte(bytes, ns));
  if (path == CopyPath::kDriver) {
    AddDriverTime(dir, ns);
    // A path without a figure in this cell has nothing to judge (Judge
    // would return at once): the driver's middle is not worked out for it.
    for (int q = 1; q < kCopyPathCount; ++q) {
      if (c.fig[q].samples.load(std::memory_order_relaxed) != 0) Judge(c, index, q);
    }
  } else {
    Judge(c, index, p);
  }
}

void PathJudge::Overlapped(CopyPath path, CopyDir dir, uint64_t bytes, bool sync, uint64_t ns) {
  if (path != CopyPath::kDriver || !Counts(dir, bytes)) return;
  AddDriverTime(dir, ns);
  cells_[IndexOf(dir, bytes, sync)].driver_overlapped.fetch_add(1, std::memory_order_relaxed);
}

void PathJudge::Judge(Cell& c, int index, int p) {
  const uint64_t np = c.fig[p].samples.load(std::memory_order_relaxed);
  if (np == 0) return;
  const uint64_t driver = c.fig[0].Value();
  if (driver == 0) return;
  const uint64_t mine = c.fig[p].Value();
  if (mine == 0) return;
  // The path's speed as a fraction of the driver's (ps per byte inverted).
  const double ratio = static_cast<double>(driver) / static_cast<double>(mine);
  const auto old = static_cast<PathVerdict>(c.verdict[p].load(std::memory_order_relaxed));
  PathVerdict now = old;
  if (ratio < kLoseBelow) {
    // One sample decides only a clear loss; a close one waits for more.
    if (np >= kMinSamples || ratio < kClearLoss) now = PathVerdict::kLoses;
  } else if (ratio > 1.0 / kLoseBelow || (old == PathVerdict::kUnknown && np >= kMinSamples)) {
    now = PathVerdict::kWins;
  }
  if (now == old) return;
  c.verdict[p].store(static_cast<uint8_t>(now), std::memory_order_relaxed);
  c.since_probe[p].store(0, std::memory_order_relaxed);
  c.probe_shift[p].store(0, std::memory_order_relaxed);
  if (now == PathVerdict::kLoses) c.losses[p].fetch_add(1, std::memory_order_relaxed);
  if (callback_ != nullptr) callback_(ReportOf(c, index, p));
}

bool PathJudge::WorthSetup(CopyDir dir, double setup_ns) const {
  const int d = dir == CopyDir::kDeviceToHost ? 1 : 0;
  return !enabled_.load(std::memory_order_relaxed) ||
         static_cast<double>(driver_ns_[d].load(std::memory_order_relaxed)) >= setup_ns;
}

bool PathJudge::LosesAnywhere(CopyPath path, int size_class) const {
  if (size_class < 0 || size_class >= kClasses || !enabled_.load(std::memory_order_relaxed)) {
    return false;
  }
  const int p = static_cast<int>(path);
  for (int k = 0; k < 4; ++k) {
    const Cell& c = cells_[k * kClasses + size_class];
    if (c.verdict[p].load(std::memory_order_relaxed) == static_cast<uint8_t>(PathVerdict::kLoses)) {
      return true;
    }
  }
  return false;
}

PathCellReport PathJudge::ReportOf(const Cell& c, int index, int p) const {
  PathCellReport r;
  const int k = index / kClasses;
  r.dir = k >= 2 ? CopyDir::kDeviceToHost : CopyDir::kHostToDevice;
  r.sync = (k % 2) == 1;
  r.size_class = static_cast<uint8_t>(index % kClasses);
  r.path = static_cast<CopyPath>(p);
  r.verdict = static_cast<PathVerdict>(c.verdict[p].load(std::memory_order_relaxed));
  r.path_copies = c.fig[p].samples.load(std::memory_order_relaxed);
  r.driver_copies = c.fig[0].samples.load(std::memory_order_relaxed);
  // ps per byte times 2^20 bytes, in ns.
  r.path_ns_per_mib = c.fig[p].Value() * 1048576 / 1000;
  r.driver_ns_per_mib = c.fig[0].Value() * 1048576 / 1000;
  r.losses = c.losses[p].load(std::memory_order_relaxed);
  return r;
}

int PathJudge::Report(PathCellReport* out, int max) const {
  int n = 0;
  for (int i = 0; i < kCells; ++i) {
    for (int p = 1; p < kCopyPathCount; ++p) {
      if (cells_[i].verdict[p].load(std::memory_order_relaxed) == 0) continue;
      if (n < max) out[n] = ReportOf(cells_[i], i, p);
      ++n;
    }
  }
  return n;
}

void PathJudge::Reset() {
  for (Cell& c : cells_) {
    for (int p = 0; p < kCopyPathCount; ++p) {
      c.fig[p].Clear();
      c.verdict[p].store(0, std::memory_order_relaxed);
      c.since_probe[p].store(0, std::memory_order_relaxed);
      c.probe_shift[p].store(0, std::memory_order_relaxed);
      c.losses[p].store(0, std::memory_order_relaxed);
    }
    c.driver_overlapped.store(0, std::memory_order_relaxed);
  }
  copies_in_flight_.store(0, std::memory_order_relaxed);
  copies_begun_.store(0, std::memory_order_relaxed);
  for (auto& d : driver_ns_) d.store(0, std::memory_order_relaxed);
  driver_probes_.store(0, std::memory_order_relaxed);
  path_retries_.store(0, std::memory_order_relaxed);
}

}  // namespace optimize
}  // namespace pinshim
