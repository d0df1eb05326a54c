// A module for site_profile_test to load after its profile: the test names
// a return address inside it and checks the profile finds it only while it
// is loaded.
#include <cstdint>

extern "C" __attribute__((noinline, visibility("default"))) uintptr_t
PinshimSiteProfileTestReturnAddress() {
  return reinterpret_cast<uintptr_t>(__builtin_return_address(0));
}

// Calls the function above, so that its return address lies in this module.
extern "C" __attribute__((noinline, visibility("default"))) uintptr_t
PinshimSiteProfileTestCallSite() {
  uintptr_t ret = PinshimSiteProfileTestReturnAddress();
  asm volatile("" ::: "memory");  // keeps the call from becoming a jump
  return ret;
}
