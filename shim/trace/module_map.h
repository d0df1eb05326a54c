// The module map: every loaded ELF object with its path, build id, load bias
// and executable segments, so that `pinshim report` can symbolize raw
// instruction pointers offline. Written at start and after every
// dlopen/dlclose as a new generation (kModules, see trace_format.h).
#ifndef PINSHIM_SHIM_TRACE_MODULE_MAP_H_
#define PINSHIM_SHIM_TRACE_MODULE_MAP_H_

#include <cstddef>
#include <cstdint>

namespace pinshim {
namespace trace {

// Identity of one loaded module, for telling whether a module went away.
struct ModuleKey {
  uintptr_t bias;
  uint64_t path_hash;
};

// Walks the loaded modules (dl_iterate_phdr: takes the loader's lock, so not
// for signal handlers) and encodes them as a kModules payload of
// `generation` into out[0, cap). `main_path` names the executable, whose
// loader entry has no name. Fills keys[0, *n_keys) (at most max_keys).
// Returns the payload length, or 0 when it did not fit in `cap`.
size_t EncodeModuleMap(uint32_t generation, const char* main_path, uint8_t* out, size_t cap,
                       ModuleKey* keys, size_t max_keys, size_t* n_keys);

// True when some module of `before` is missing from `after` (unloaded, or
// loaded again elsewhere): addresses may now mean different code.
bool ModulesWentAway(const ModuleKey* before, size_t n_before, const ModuleKey* after,
                     size_t n_after);

}  // namespace trace
}  // namespace pinshim

#endif  // PINSHIM_SHIM_TRACE_MODULE_MAP_H_
