// A profile of hot allocation sites: what `pinshim report --profile-out`
// writes and optimize mode reads (PINSHIM_PROFILE) to serve those sites'
// allocations from the pinned arena from their first allocation on.
//
// The file is text:
//
//   # pinshim profile v1                      line 1, exactly
//   # anything                                comments, anywhere after it
//   site <frame> [<frame> ...]                one site: 1 to kSiteFrames frames,
//                                             innermost first (site.h)
//
// with frame = <GNU build id, hex>+0x<offset, hex>: a return address minus
// the load bias of the module carrying that build id. Blank lines are
// allowed; fields are separated by spaces or tabs.
//
// Load runs in the preloaded library's constructor and Contains inside the
// malloc hook, so neither allocates, uses stdio or takes a lock: the file is
// read with open/read into fixed tables inside the object (about 210 KiB;
// keep it in static storage, which its constant-initialized constructor
// allows).
#ifndef PINSHIM_SHIM_OPTIMIZE_SITE_PROFILE_H_
#define PINSHIM_SHIM_OPTIMIZE_SITE_PROFILE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/optimize/site.h"

namespace pinshim {
namespace optimize {

// Line 1 of every profile of this format version.
constexpr char kProfileHeader[] = "# pinshim profile v1";

constexpr size_t kMaxProfileSites = 4096;
// Distinct build ids the sites of one profile may name.
constexpr size_t kMaxProfileModules = 256;
// Build ids are compared by at most their first 64 bytes, as traces store them.
constexpr size_t kMaxBuildIdBytes = 64;
// Longest line other than a comment, newline excluded.
constexpr size_t kMaxProfileLineBytes = 1023;
// Enough room for any message Load writes, the file name cut to fit.
constexpr size_t kProfileErrorLen = 512;

class SiteProfile {
 public:
  constexpr SiteProfile() = default;
  SiteProfile(const SiteProfile&) = delete;
  SiteProfile& operator=(const SiteProfile&) = delete;

  // Reads the profile at `path`, replacing what was loaded. Returns false
  // with one line in `err` ("PATH: ..." or "PATH:LINE: ...") for a file that
  // cannot be read, a missing or different header, a malformed line, or
  // more than kMaxProfileSites sites; the profile is then empty. Must not
  // run while another thread calls Contains.
  bool Load(const char* path, char* err, size_t err_len);

  // True when a loaded site matches `frames`: each of its frames, resolved
  // to an address in the module now loaded with that build id, equals
  // frames.ips at the same position (a site of fewer frames than frames.n
  // matches as a prefix). Modules loaded or unloaded since the last call are
  // found again. Thread-safe and allocation-free; it calls dl_iterate_phdr,
  // holding no lock of its own, and costs microseconds, so callers cache the
  // answer per site.
  bool Contains(const SiteFrames& frames) const;

  // Sites loaded.
  size_t size() const { return n_sites_; }

 private:
  // Load's steps. One line of the file as its bytes arrive; its check once
  // it ended (the header's, or ParseLine), false with the message in err;
  // and the reading of every line of fd, false on the first bad one.
  struct ProfileLine;
  bool FinishLine(const char* path, ProfileLine* line, char* err, size_t err_len);
  bool ReadLines(int fd, const char* path, ProfileLine* line, bool* any, char* err, size_t err_len);
  struct Site {
    uint64_t offset[kSiteFrames];
    uint16_t module[kSiteFrames];  // index into modules_
    uint8_t n;
  };
  struct BuildId {
    uint8_t len;
    uint8_t bytes[kMaxBuildIdBytes];
  };
  // Where each profile module is loaded now (kNotLoaded when it is not),
  // and the loader's (adds, subs) counters that view belongs to.
  struct Resolution;

  bool ParseLine(const char* path, long line_no, const char* line, size_t len, char* err,
                 size_t err_len);
  int FindOrAddModule(const uint8_t* id, size_t len);
  void Resolve(Resolution* r) const;
  void Publish(const Resolution& r) const;
  template <typename BiasOf>
  bool Match(const SiteFrames& frames, BiasOf bias_of) const;

  Site sites_[kMaxProfileSites] = {};
  BuildId modules_[kMaxProfileModules] = {};
  size_t n_sites_ = 0;
  size_t n_modules_ = 0;

  // The last resolution, shared by all threads under a sequence lock: odd
  // while one thread writes it, 0 until the first is written. A reader that
  // finds it stale or being written resolves for itself.
  mutable std::atomic<uint64_t> seq_{0};
  mutable std::atomic<uint64_t> adds_{0};
  mutable std::atomic<uint64_t> subs_{0};
  mutable std::atomic<uint64_t> bias_[kMaxProfileModules] = {};
};

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_SITE_PROFILE_H_
