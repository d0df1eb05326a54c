#include "shim/core/reentry.h"

namespace pinshim {

PINSHIM_TLS int t_reentry[static_cast<int>(Reentry::kCount)] = {};

}  // namespace pinshim
