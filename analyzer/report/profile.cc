#include "analyzer/report/profile.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "analyzer/report/format.h"
#include "shim/core/safe_file.h"
#include "shim/optimize/site.h"
#include "shim/optimize/site_profile.h"

namespace pinshim {
namespace report {
namespace {

bool IsPinshimModule(const Module* m) {
  return m != nullptr && Basename(m->path).compare(0, 10, "libpinshim") == 0;
}

// Cuts an allocation stack the way the library cuts a site at run time:
// frames in libpinshim* skipped, the next kSiteFrames kept, as recorded
// (return addresses from unw_backtrace, not adjusted). False when one of
// them cannot be named by build id and offset, or none is left. `key`
// identifies the cut either way.
bool CutSite(const TraceReader& trace, const Stack& stack, std::vector<ProfileFrame>* frames,
             std::string* key) {
  bool nameable = true;
  int kept = 0;
  for (size_t i = 0; i < stack.ips.size() && kept < optimize::kSiteFrames; ++i) {
    const uint64_t ip = stack.ips[i];
    const Module* m = trace.ModuleAt(stack.generation, ip);
    if (IsPinshimModule(m)) continue;
    ++kept;
    if (m == nullptr || m->build_id.empty()) {
      nameable = false;
      *key += "?" + HexNumber(ip) + " ";
      continue;
    }
    ProfileFrame f{m->build_id, ip - m->bias};
    *key += FormatProfileFrame(f) + " ";
    frames->push_back(std::move(f));
  }
  return nameable && kept > 0;
}

// Where a site is, for a person: its first frame in the program's own code,
// else its first frame outside pinshim.
std::string Describe(const SymbolizedStack& s) {
  if (const Frame* f = s.SiteFrame()) return f->Describe();
  for (const Frame& f : s.frames) {
    if (Basename(f.module).compare(0, 10, "libpinshim") != 0) return f.Describe();
  }
  return "";
}

bool Hotter(const HotAllocSite& a, const HotAllocSite& b) {
  if (a.seconds_lost != b.seconds_lost) return a.seconds_lost > b.seconds_lost;
  if (a.bytes != b.bytes) return a.bytes > b.bytes;
  if (a.copies != b.copies) return a.copies > b.copies;
  return a.FramesText() < b.FramesText();
}

std::string Plural(uint64_t n, const char* one, const char* many) {
  return FormatCount(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::string FormatProfileFrame(const ProfileFrame& frame) {
  return HexBytes(frame.build_id) + "+" + HexNumber(frame.offset);
}

std::string HotAllocSite::FramesText() const {
  std::string out;
  for (const ProfileFrame& f : frames) {
    if (!out.empty()) out += " ";
    out += FormatProfileFrame(f);
  }
  return out;
}

void HotSiteCollector::OnCopy(const Event& e, const PinnedAlloc*, const HostAlloc* host) {
  if (host == nullptr || host->source != kHostAllocMalloc || !e.IsHostDeviceCopy()) return;
  const MemKind kind = e.HostKind();
  if (kind != MemKind::kPageable && kind != MemKind::kPinnedByPinshim) return;
  Stats& s = by_stack_[host->stack];
  ++s.copies;
  s.bytes += e.bytes;
  s.lost += model_->PageableLoss(e.dir, e.bytes);
  s.allocations.insert(host->id);
}

HotSites HotSiteCollector::Collect(const TraceReader& trace, Symbolizer* sym) const {
  struct Group {
    HotAllocSite site;
    bool nameable = true;
    uint32_t stack = 0;  // the stack of most bytes, to describe the site
    uint64_t stack_bytes = 0;
  };
  std::map<std::string, Group> groups;  // by cut frames: sorted, so deterministic
  for (const auto& kv : by_stack_) {
    const uint32_t id = kv.first;
    const Stats& s = kv.second;
    std::vector<ProfileFrame> frames;
    std::string key;
    const Stack* stack = id == 0 ? nullptr : trace.FindStack(id);
    bool nameable = stack != nullptr && CutSite(trace, *stack, &frames, &key);
    if (stack == nullptr) key = "stack " + std::to_string(id);
    Group& g = groups[key];
    if (g.site.copies == 0) {
      g.site.frames = std::move(frames);
      g.nameable = nameable;
    }
    g.site.copies += s.copies;
    g.site.bytes += s.bytes;
    g.site.seconds_lost += s.lost;
    g.site.allocations += s.allocations.size();
    if (s.bytes > g.stack_bytes || (s.bytes == g.stack_bytes && id < g.stack)) {
      g.stack = id;
      g.stack_bytes = s.bytes;
    }
  }
  HotSites out;
  for (auto& kv : groups) {
    Group& g = kv.second;
    if (g.site.copies < options_->pageable_hot_min_copies ||
        g.site.seconds_lost < options_->pageable_hot_min_seconds) {
      continue;
    }
    if (!g.nameable) {
      ++out.unwritable;
      continue;
    }
    if (sym != nullptr) g.site.where = Describe(sym->Symbolize(g.stack));
    out.sites.push_back(std::move(g.site));
  }
  std::sort(out.sites.begin(), out.sites.end(), Hotter);
  return out;
}

HotSites MergeHotSites(const std::vector<const HotSites*>& processes) {
  HotSites out;
  std::map<std::string, size_t> index;
  for (const HotSites* p : processes) {
    out.unwritable += p->unwritable;
    for (const HotAllocSite& s : p->sites) {
      auto it = index.find(s.FramesText());
      if (it == index.end()) {
        index[s.FramesText()] = out.sites.size();
        out.sites.push_back(s);
        continue;
      }
      HotAllocSite& into = out.sites[it->second];
      into.copies += s.copies;
      into.bytes += s.bytes;
      into.allocations += s.allocations;
      into.seconds_lost += s.seconds_lost;
      into.processes += s.processes;
      if (into.where.empty()) into.where = s.where;
    }
  }
  std::sort(out.sites.begin(), out.sites.end(), Hotter);
  return out;
}

bool WriteProfile(const std::string& path, const HotSites& sites, size_t traces,
                  std::string* error) {
  std::string text = std::string(optimize::kProfileHeader) + "\n";
  text += "# Hot allocation sites from " + Plural(traces, "trace", "traces") +
          ", hottest first, written by pinshim report --profile-out.\n"
          "# A site is up to " +
          std::to_string(optimize::kSiteFrames) +
          " return addresses of the allocating stack outside libpinshim,\n"
          "# innermost first, each <GNU build id>+0x<offset from the module's load bias>.\n"
          "# Under PINSHIM_MODE=optimize, PINSHIM_PROFILE=<this file> serves these sites'\n"
          "# allocations from pinned memory.\n";
  int n = 0;
  for (const HotAllocSite& s : sites.sites) {
    text += "#\n# " + std::to_string(++n) + ". " +
            // One comment line: a newline in a name must not start a line
            // the loader would read as a site.
            (s.where.empty() ? std::string("(not symbolized)") : Printable(s.where)) + ": " +
            Plural(s.allocations, "buffer", "buffers") + " copied " +
            Plural(s.copies, "time", "times") + ", " + FormatBytes(s.bytes) + " in all; " +
            FormatSeconds(s.seconds_lost) + " lost if pageable";
    if (s.processes > 1) text += ", in " + std::to_string(s.processes) + " processes";
    text += "\nsite " + s.FramesText() + "\n";
  }
  // Through an unguessable temporary name beside it, renamed into place; a
  // link, a FIFO or another user's file at the name is refused
  // (shim/core/safe_file.h).
  const int err = ReplaceWithData(path.c_str(), 0644, text.data(), text.size());
  if (err != 0) {
    *error = "cannot write the profile " + path + ": " + SafeFileReason(err);
    return false;
  }
  return true;
}

}  // namespace report
}  // namespace pinshim
