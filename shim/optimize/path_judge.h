// Optimize mode's check on itself. For every direction, size class and
// synchronous or asynchronous call it keeps, from the running process, how
// long the program's thread spent per byte in copies that took the driver's
// pageable path and in copies that took each of optimize mode's paths. A
// path measured slower than the driver in a cell is not taken there any
// more, except for probes, rarer each time it loses again, that notice when
// it wins again; a path that wins still lets a copy take the driver's path
// now and then (rarer each time it wins again), so both figures stay
// current. So optimize mode is never slower than the driver by more than
// what its probes cost, on any pattern, without knowing the pattern.
//
// Before a cell has a driver figure its first copy goes to the driver (a
// figure for free), unless the cost model expects the path to win by far
// (large copies, where one driver copy costs more than all the setup).
// Setting a path up (a staging ring) is worth it only once the program has
// spent that long in the driver's copies of that direction (WorthSetup):
// a program that makes a few small copies never pays for a ring.
//
// Threads: relaxed atomics only; a racing update loses a sample, never
// corrupts one. One Record and one Take per copy, each a few loads; a
// figure's middle is worked out again only after a sample changed it, and a
// driver copy judges only the paths that have figures of their own.
#ifndef PINSHIM_SHIM_OPTIMIZE_PATH_JUDGE_H_
#define PINSHIM_SHIM_OPTIMIZE_PATH_JUDGE_H_

#include <atomic>
#include <cstdint>

#include "shim/core/events.h"

namespace pinshim {
namespace optimize {

// How a copy ran. kDriver: the driver's own path for pageable memory.
enum class CopyPath : uint8_t { kDriver = 0, kStaged = 1, kPinnedInPlace = 2 };
constexpr int kCopyPathCount = 3;

enum class PathVerdict : uint8_t { kUnknown = 0, kWins = 1, kLoses = 2 };

// A cell's state for the summary and the trace.
struct PathCellReport {
  CopyDir dir;
  bool sync;
  uint8_t size_class;  // PathJudge::ClassOf
  CopyPath path;
  PathVerdict verdict;
  uint64_t path_copies, driver_copies;
  uint64_t path_ns_per_mib, driver_ns_per_mib;  // current figures, 0: none yet
  uint64_t losses;                              // times the path was found slower
};

// Called when a cell's verdict on a path changes (from the copy's thread,
// outside every lock). Null: nobody listens.
using PathVerdictCallback = void (*)(const PathCellReport& cell);

class PathJudge {
 public:
  // Size classes by powers of four from 256 KiB: [0, 256K), [256K, 1M),
  // [1M, 4M), [4M, 16M), [16M, 64M), [64M, 256M), [256M, 1G), [1G, ...).
  static constexpr int kClasses = 8;
  static int ClassOf(uint64_t bytes) {
    const uint64_t units = bytes >> 18;  // 256 KiB
    if (units == 0) return 0;
    const int c = 1 + (63 - __builtin_clzll(units)) / 2;
    return c < kClasses ? c : kClasses - 1;
  }
  // The class's lower bound ("256K"), for messages.
  static const char* ClassName(int size_class);

  // Samples a figure needs before it decides anything but a clear loss
  // (a path at less than kClearLoss of the driver's speed in one copy).
  static constexpr uint32_t kMinSamples = 2;
  static constexpr double kClearLoss = 0.8;
  // Hysteresis: a path loses below this fraction of the driver's speed;
  // one that lost wins again above its inverse.
  static constexpr double kLoseBelow = 0.98;
  // Samples a figure keeps (their middle is the figure).
  static constexpr int kRecent = 4;

  constexpr PathJudge() = default;
  PathJudge(const PathJudge&) = delete;
  PathJudge& operator=(const PathJudge&) = delete;

  void set_callback(PathVerdictCallback cb) { callback_ = cb; }
  // Off (PINSHIM_SELF_CHECK=0): every Take answers true, setups are always
  // worth it, nothing is recorded.
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }

  // Before a copy `path` could take: whether it takes it (false: the
  // driver's path). expected_win: the cost model's ratio of the driver's
  // time to the path's for this copy (how much it expects the path to win).
  bool Take(CopyPath path, CopyDir dir, uint64_t bytes, bool sync, double expected_win = 1.0);
  // After the copy: the time the program's thread spent in it, on the path
  // it took. Failed copies are not recorded.
  void Record(CopyPath path, CopyDir dir, uint64_t bytes, bool sync, uint64_t ns);
  // Copies of other threads running at the same time slow each other (the
  // driver serializes parts of its pageable copies against other calls), so
  // such a copy's time measures their contention, not its path: it is no
  // sample. BeginCopy/EndCopy bracket a copy; EndCopy says whether another
  // thread's copy ran during it. Overlapped() counts a driver copy that was
  // no sample toward the cell's first driver copies, so a cell whose copies
  // always overlap stops sending them to the driver for a figure it cannot
  // get, and takes the path where the cost model expects it to win; its
  // time still counts as time spent in the driver's copies (WorthSetup).
  // (Inline: every copy of optimize mode brackets itself.)
  uint64_t BeginCopy() {
    const bool busy = copies_in_flight_.fetch_add(1, std::memory_order_acq_rel) != 0;
    const uint64_t begun = copies_begun_.fetch_add(1, std::memory_order_acq_rel);
    return begun << 1 | (busy ? 1 : 0);
  }
  bool EndCopy(uint64_t ticket) {
    // Another copy began after this one did, and before it ended.
    const bool other = copies_begun_.load(std::memory_order_acquire) != (ticket >> 1) + 1;
    copies_in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    return (ticket & 1) != 0 || other;
  }
  void Overlapped(CopyPath path, CopyDir dir, uint64_t bytes, bool sync, uint64_t ns);
  // Whether the program has spent setup_ns in the driver's pageable copies
  // of this direction: then setting up a path that serves it pays.
  bool WorthSetup(CopyDir dir, double setup_ns) const;
  // Whether `path` lost in any cell of this size class (either direction,
  // either kind of call): for decisions made before the direction is known
  // (which allocations the arena serves).
  bool LosesAnywhere(CopyPath path, int size_class) const;

  // Fills out[0, max) with the cells that have a verdict on a path other
  // than the driver; returns how many there are.
  int Report(PathCellReport* out, int max) const;
  uint64_t driver_probes() const { return driver_probes_.load(std::memory_order_relaxed); }
  uint64_t path_retries() const { return path_retries_.load(std::memory_order_relaxed); }

  // Forget everything (fork child; tests).
  void Reset();

 private:
  // Picoseconds per byte of a path's recent copies in one cell.
  struct Figure {
    std::atomic<uint64_t> samples{0};
    std::atomic<uint32_t> recent[kRecent] = {};
    // The middle as of a count of samples: that count's low 32 bits above,
    // the middle below (never 0: a sample is at least 1). Value sorts the
    // samples only when one came since; one racing an Add may keep a middle
    // without the new sample until the next (a sample lost, as elsewhere).
    mutable std::atomic<uint64_t> middle{0};
    void Add(uint32_t ps_per_byte);
    uint64_t Value() const;  // the middle of the recent samples; 0: none
    void Clear();
  };
  struct Cell {
    Figure fig[kCopyPathCount];
    std::atomic<uint8_t> verdict[kCopyPathCount] = {};
    // Copies since the last probe, and the interval (a power of two) at
    // which the next one comes: a driver probe while the path wins, a
    // path retry while it loses.
    std::atomic<uint32_t> since_probe[kCopyPathCount] = {};
    std::atomic<uint32_t> probe_shift[kCopyPathCount] = {};
    std::atomic<uint64_t> losses[kCopyPathCount] = {};
    std::atomic<uint32_t> driver_overlapped{0};  // driver copies that were no sample
  };
  static constexpr int kCells = 2 * 2 * kClasses;
  static constexpr uint32_t kFirstProbeShift = 3;  // a driver probe after 8 winning copies
  static constexpr uint32_t kMaxProbeShift = 8;    // ... at most every 256
  static constexpr uint32_t kFirstRetryShift = 5;  // a losing path retried after 32 copies
  static constexpr uint32_t kMaxRetryShift = 12;   // ... at most every 4096

  static int IndexOf(CopyDir dir, uint64_t bytes, bool sync) {
    const int d = dir == CopyDir::kDeviceToHost ? 1 : 0;
    return (d * 2 + (sync ? 1 : 0)) * kClasses + ClassOf(bytes);
  }
  bool Probe(Cell& c, int p, uint32_t first_shift);
  void Judge(Cell& c, int index, int p);
  // Whether a copy of `bytes` in `dir` is one the judge keeps figures for.
  bool Counts(CopyDir dir, uint64_t bytes) const;
  // Time the program spent in the driver's pageable copies (WorthSetup).
  void AddDriverTime(CopyDir dir, uint64_t ns);
  PathCellReport ReportOf(const Cell& c, int index, int p) const;

  Cell cells_[kCells];
  std::atomic<uint64_t> driver_ns_[2] = {};  // H2D, D2H: the driver's pageable copies
  std::atomic<uint64_t> driver_probes_{0}, path_retries_{0};
  std::atomic<uint32_t> copies_in_flight_{0};
  std::atomic<uint64_t> copies_begun_{0};
  std::atomic<bool> enabled_{true};
  PathVerdictCallback callback_ = nullptr;
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_PATH_JUDGE_H_
