// The C halves of the dlsym/dlopen thunks (dl_thunks.S), and dlclose.
#include <dlfcn.h>

#include <cstring>

#include "shim/core/stats.h"
#include "shim/hooks/driver_table.h"
#include "shim/hooks/state.h"
#include "shim/trace/recorder.h"

using pinshim::g_real;

extern "C" {

// Written once, read by the thunk without a lock.
PINSHIM_HIDDEN void* pinshim_real_dlsym = nullptr;

PINSHIM_HIDDEN void* pinshim_resolve_real_dlsym() {
  void* fn = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (fn == nullptr) fn = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  __atomic_store_n(&pinshim_real_dlsym, fn, __ATOMIC_RELEASE);
  return fn;
}

// dlsym of a "cu..." name through a handle or RTLD_DEFAULT.
PINSHIM_HIDDEN void* pinshim_dlsym_driver_symbol(void* handle, const char* name) {
  using RealDlsym = void* (*)(void*, const char*);
  void* fn = __atomic_load_n(&pinshim_real_dlsym, __ATOMIC_ACQUIRE);
  if (fn == nullptr) fn = pinshim_resolve_real_dlsym();
  if (fn == nullptr) return nullptr;
  void* found = reinterpret_cast<RealDlsym>(fn)(handle, name);
  if (found == nullptr || pinshim::Reentered(pinshim::Reentry::kHook)) return found;
  return pinshim::WrapDlsymResult(name, found);
}

PINSHIM_HIDDEN void* pinshim_before_dlopen(const char* /*file*/, int mode) {
  if (g_real.malloc == nullptr) pinshim::ResolveRealFunctions();
  // A library loaded with RTLD_DEEPBIND resolves its own references first,
  // so its calls may bypass pinshim; the summary says so.
  if ((mode & RTLD_DEEPBIND) != 0) pinshim::CountNote(pinshim::Note::kDeepBind);
  return reinterpret_cast<void*>(g_real.dlopen);
}

int dlclose(void* handle) {
  if (g_real.malloc == nullptr) pinshim::ResolveRealFunctions();
  int r = g_real.dlclose(handle);
  if (r == 0) pinshim::trace::NoteModulesChanged();
  return r;
}

}  // extern "C"
