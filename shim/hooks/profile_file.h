// Reading PINSHIM_PROFILE, for the library's start-up and for `pinshim run`'s
// check of it: the file is opened without blocking and must be a regular
// file of at most kMaxProfileBytes before SiteProfile::Load parses it, so a
// FIFO or a device named as the profile cannot hold up a program before main.
#ifndef PINSHIM_SHIM_HOOKS_PROFILE_FILE_H_
#define PINSHIM_SHIM_HOOKS_PROFILE_FILE_H_

#include <cstddef>
#include <cstdint>

#include "shim/optimize/site_profile.h"

namespace pinshim {

// Far above the largest profile (kMaxProfileSites lines) with its comments.
constexpr uint64_t kMaxProfileBytes = uint64_t{64} << 20;

// SiteProfile::Load on path, checked first; false with one line in err.
bool LoadProfile(const char* path, optimize::SiteProfile* profile, char* err, size_t err_len);

}  // namespace pinshim

#endif  // PINSHIM_SHIM_HOOKS_PROFILE_FILE_H_
