// Profiles of hot allocation sites (`pinshim report --profile-out FILE`),
// which optimize mode reads back (PINSHIM_PROFILE) to serve those sites'
// allocations from pinned memory from the first one on. The file format and
// the reader are shim/optimize/site_profile.h; a site is defined in
// shim/optimize/site.h.
//
// A site is hot by pageable-hot's measure, applied to allocation sites: the
// malloc-family buffers allocated there (tracked HostAlloc events, not mmap)
// were copied between host and device at least pageable_hot_min_copies
// times, losing at least pageable_hot_min_seconds against pinned memory by
// the bandwidth model. Copies from memory pinshim had already pinned count
// as if pageable, so a trace of optimize mode yields the same profile as
// one of observe mode.
#ifndef PINSHIM_ANALYZER_REPORT_PROFILE_H_
#define PINSHIM_ANALYZER_REPORT_PROFILE_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "analyzer/report/rules/rule.h"
#include "analyzer/report/symbolizer.h"
#include "analyzer/report/trace_reader.h"

namespace pinshim {
namespace report {

struct ProfileFrame {
  std::string build_id;  // raw bytes
  uint64_t offset = 0;   // return address minus the module's load bias
};

// "<build id in hex>+0x<offset in hex>", as profiles write a frame.
std::string FormatProfileFrame(const ProfileFrame& frame);

struct HotAllocSite {
  std::vector<ProfileFrame> frames;  // 1 to kSiteFrames, innermost first
  uint64_t copies = 0;               // host<->device copies of its buffers
  uint64_t bytes = 0;                // bytes those copies moved
  uint64_t allocations = 0;          // its buffers that were copied
  double seconds_lost = 0;           // those copies' loss from pageable memory (model)
  std::string where;                 // its first frame in the program's code, symbolized
  int processes = 1;

  // The site's "site ..." line without "site ": its frames, space-separated.
  std::string FramesText() const;
};

struct HotSites {
  std::vector<HotAllocSite> sites;  // hottest first
  // Hot sites no profile can name: a frame in a module without a GNU build
  // id or outside every module the trace lists, or no frame outside pinshim.
  uint64_t unwritable = 0;
};

// Gathers, during the replay of one trace, the copies of each tracked
// malloc-family allocation; Collect turns them into the process's hot sites.
class HotSiteCollector : public Rule {
 public:
  const char* id() const override { return "hot-sites"; }
  void OnCopy(const Event& e, const PinnedAlloc* pinned, const HostAlloc* host) override;
  void Finish(const RuleContext& ctx, std::vector<Finding>* out) override {}

  // The hot sites of `trace` (the one replayed), hottest first, symbolized
  // with `sym` when it is not null.
  HotSites Collect(const TraceReader& trace, Symbolizer* sym) const;

 private:
  struct Stats {
    uint64_t copies = 0;
    uint64_t bytes = 0;
    double lost = 0;
    std::unordered_set<uint64_t> allocations;
  };
  std::unordered_map<uint32_t, Stats> by_stack_;  // allocation stack -> its copies
};

// The sites of several processes as one list: sites with the same frames
// are summed; hottest first.
HotSites MergeHotSites(const std::vector<const HotSites*>& processes);

// Writes `sites` as a profile to `path` (through path + ".tmp", renamed
// into place). `traces`: how many traces they came from, for the comment.
// Returns false with a one-line reason.
bool WriteProfile(const std::string& path, const HotSites& sites, size_t traces,
                  std::string* error);

}  // namespace report
}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_REPORT_PROFILE_H_
