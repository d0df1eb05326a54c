// Allocation sites, as optimize mode's redirection and profiles name them.
//
// A site is the first kSiteFrames return addresses of the allocating
// thread's stack that lie outside libpinshim.so (the hook and anything it
// calls are skipped; libc, libstdc++ and the program's own frames are kept),
// innermost first. The analyzer cuts the same frames out of a trace's
// allocation stacks (frames in a module named libpinshim*.so skipped), so
// a site seen at run time and one written to a profile compare equal.
//
// In a profile a frame is (module build id, return address minus the
// module's load bias): that survives address randomization and rebuilds of
// every other module. A profile site with fewer frames (a trace recorded
// with a short stack depth) matches a stack whose first frames equal it.
#ifndef PINSHIM_SHIM_OPTIMIZE_SITE_H_
#define PINSHIM_SHIM_OPTIMIZE_SITE_H_

#include <cstdint>

namespace pinshim {
namespace optimize {

constexpr int kSiteFrames = 4;

struct SiteFrames {
  int n = 0;                        // 0 <= n <= kSiteFrames
  uintptr_t ips[kSiteFrames] = {};  // return addresses, innermost first
};

// A 64-bit key for a site (never 0), for tables of sites seen at run time.
inline uint64_t SiteKey(const SiteFrames& f) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(f.n);
  for (int i = 0; i < f.n; ++i) {
    h ^= f.ips[i];
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  return h == 0 ? 1 : h;
}

}  // namespace optimize
}  // namespace pinshim

#endif  // PINSHIM_SHIM_OPTIMIZE_SITE_H_
