// The self-check's decisions written plainly, for tests only: every figure's
// middle sorted again at every look, every path judged at every driver copy.
// PathJudge (path_judge.h) works the same decisions out with less work per
// copy; path_judge_test.cc drives both with the same copies and requires
// the same answers, verdicts, probes and figures.
#ifndef PINSHIM_SHIM_OPTIMIZE_PATH_JUDGE_REFERENCE_H_
#define PINSHIM_SHIM_OPTIMIZE_PATH_JUDGE_REFERENCE_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "shim/optimize/path_judge.h"

namespace pinshim {
namespace optimize {

class ReferenceJudge {
 public:
  static constexpr uint32_t kFirstProbeShift = 3, kMaxProbeShift = 8;
  static constexpr uint32_t kFirstRetryShift = 5, kMaxRetryShift = 12;
  static constexpr double kSkipDriverFirst = 4.0;

  bool Take(CopyPath path, CopyDir dir, uint64_t bytes, bool sync, double expected_win = 1.0) {
    if (path == CopyPath::kDriver || !enabled_) return true;
    Cell& c = cells_[Index(dir, bytes, sync)];
    const int p = static_cast<int>(path);
    const bool can_probe_driver = path != CopyPath::kPinnedInPlace;
    if (c.samples[0] == 0) {
      if (expected_win < kSkipDriverFirst && c.driver_overlapped < PathJudge::kMinSamples) {
        return !can_probe_driver;
      }
      return !can_probe_driver || !Probe(c, p, kFirstProbeShift);
    }
    if (c.verdict[p] == PathVerdict::kLoses) {
      if (!Probe(c, p, kFirstRetryShift)) return false;
      ++path_retries_;
      return true;
    }
    if (c.verdict[p] == PathVerdict::kUnknown || !can_probe_driver) return true;
    if (!Probe(c, p, kFirstProbeShift)) return true;
    ++driver_probes_;
    return false;
  }

  void Record(CopyPath path, CopyDir dir, uint64_t bytes, bool sync, uint64_t ns) {
    if (bytes == 0 || (dir != CopyDir::kHostToDevice && dir != CopyDir::kDeviceToHost) ||
        !enabled_) {
      return;
    }
    const int index = Index(dir, bytes, sync);
    Cell& c = cells_[index];
    const int p = static_cast<int>(path);
    const uint64_t ps = ns * 1000 / bytes;
    c.recent[p][c.samples[p] % PathJudge::kRecent] = ps > UINT32_MAX ? UINT32_MAX
                                                     : ps == 0       ? 1
                                                                     : static_cast<uint32_t>(ps);
    ++c.samples[p];
    if (path == CopyPath::kDriver) {
      driver_ns_[dir == CopyDir::kDeviceToHost ? 1 : 0] += ns;
      for (int q = 1; q < kCopyPathCount; ++q) Judge(c, index, q);
    } else {
      Judge(c, index, p);
    }
  }

  void Overlapped(CopyPath path, CopyDir dir, uint64_t bytes, bool sync, uint64_t ns) {
    if (path != CopyPath::kDriver || bytes == 0 ||
        (dir != CopyDir::kHostToDevice && dir != CopyDir::kDeviceToHost) || !enabled_) {
      return;
    }
    driver_ns_[dir == CopyDir::kDeviceToHost ? 1 : 0] += ns;
    ++cells_[Index(dir, bytes, sync)].driver_overlapped;
  }

  bool WorthSetup(CopyDir dir, double setup_ns) const {
    return !enabled_ ||
           static_cast<double>(driver_ns_[dir == CopyDir::kDeviceToHost ? 1 : 0]) >= setup_ns;
  }
  bool LosesAnywhere(CopyPath path, int size_class) const {
    if (size_class < 0 || size_class >= PathJudge::kClasses || !enabled_) return false;
    for (int k = 0; k < 4; ++k) {
      if (cells_[k * PathJudge::kClasses + size_class].verdict[static_cast<int>(path)] ==
          PathVerdict::kLoses) {
        return true;
      }
    }
    return false;
  }
  std::vector<PathCellReport> Report() const {
    std::vector<PathCellReport> out;
    for (int i = 0; i < kCells; ++i) {
      for (int p = 1; p < kCopyPathCount; ++p) {
        if (cells_[i].verdict[p] != PathVerdict::kUnknown) out.push_back(ReportOf(i, p));
      }
    }
    return out;
  }
  const std::vector<PathCellReport>& changes() const { return changes_; }
  uint64_t driver_probes() const { return driver_probes_; }
  uint64_t path_retries() const { return path_retries_; }
  void set_enabled(bool on) { enabled_ = on; }
  // Forgets everything but whether it is on and the verdict changes it
  // reported (as a callback that heard them keeps them).
  void Reset() {
    std::vector<PathCellReport> heard;
    heard.swap(changes_);
    const bool on = enabled_;
    *this = ReferenceJudge();
    changes_.swap(heard);
    enabled_ = on;
  }

 private:
  static constexpr int kCells = 4 * PathJudge::kClasses;
  struct Cell {
    uint64_t samples[kCopyPathCount] = {};
    uint32_t recent[kCopyPathCount][PathJudge::kRecent] = {};
    PathVerdict verdict[kCopyPathCount] = {};
    uint32_t since_probe[kCopyPathCount] = {};
    uint32_t probe_shift[kCopyPathCount] = {};
    uint64_t losses[kCopyPathCount] = {};
    uint32_t driver_overlapped = 0;
  };

  static int Index(CopyDir dir, uint64_t bytes, bool sync) {
    return ((dir == CopyDir::kDeviceToHost ? 2 : 0) + (sync ? 1 : 0)) * PathJudge::kClasses +
           PathJudge::ClassOf(bytes);
  }
  uint64_t Middle(const Cell& c, int p) const {
    const int k = static_cast<int>(std::min<uint64_t>(c.samples[p], PathJudge::kRecent));
    if (k == 0) return 0;
    std::vector<uint32_t> v(c.recent[p], c.recent[p] + k);
    std::sort(v.begin(), v.end());
    return k % 2 == 1 ? v[k / 2] : (uint64_t{v[k / 2 - 1]} + v[k / 2]) / 2;
  }
  bool Probe(Cell& c, int p, uint32_t first_shift) {
    const uint32_t shift = std::max(c.probe_shift[p], first_shift);
    if (++c.since_probe[p] < (uint32_t{1} << shift)) return false;
    c.since_probe[p] = 0;
    const uint32_t cap = first_shift == kFirstRetryShift ? kMaxRetryShift : kMaxProbeShift;
    c.probe_shift[p] = std::min(shift + 1, cap);
    return true;
  }
  void Judge(Cell& c, int index, int p) {
    const uint64_t np = c.samples[p], driver = Middle(c, 0), mine = Middle(c, p);
    if (np == 0 || driver == 0 || mine == 0) return;
    const double ratio = static_cast<double>(driver) / static_cast<double>(mine);
    const PathVerdict old = c.verdict[p];
    PathVerdict now = old;
    if (ratio < PathJudge::kLoseBelow) {
      if (np >= PathJudge::kMinSamples || ratio < PathJudge::kClearLoss) now = PathVerdict::kLoses;
    } else if (ratio > 1.0 / PathJudge::kLoseBelow ||
               (old == PathVerdict::kUnknown && np >= PathJudge::kMinSamples)) {
      now = PathVerdict::kWins;
    }
    if (now == old) return;
    c.verdict[p] = now;
    c.since_probe[p] = 0;
    c.probe_shift[p] = 0;
    if (now == PathVerdict::kLoses) ++c.losses[p];
    changes_.push_back(ReportOf(index, p));
  }
  PathCellReport ReportOf(int index, int p) const {
    const Cell& c = cells_[index];
    PathCellReport r;
    const int k = index / PathJudge::kClasses;
    r.dir = k >= 2 ? CopyDir::kDeviceToHost : CopyDir::kHostToDevice;
    r.sync = (k % 2) == 1;
    r.size_class = static_cast<uint8_t>(index % PathJudge::kClasses);
    r.path = static_cast<CopyPath>(p);
    r.verdict = c.verdict[p];
    r.path_copies = c.samples[p];
    r.driver_copies = c.samples[0];
    r.path_ns_per_mib = Middle(c, p) * 1048576 / 1000;
    r.driver_ns_per_mib = Middle(c, 0) * 1048576 / 1000;
    r.losses = c.losses[p];
    return r;
  }

  Cell cells_[kCells];
  uint64_t driver_ns_[2] = {};
  uint64_t driver_probes_ = 0, path_retries_ = 0;
  bool enabled_ = true;
  std::vector<PathCellReport> changes_;
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_PATH_JUDGE_REFERENCE_H_
