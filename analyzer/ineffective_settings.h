// Settings that do nothing in the mode pinshim run is about to start a
// program in: budgets without enforce mode, optimize mode's tuning without
// optimize mode, trace options without a trace. pinshim run reports each
// kind in one line instead of ignoring them silently.
#ifndef PINSHIM_ANALYZER_INEFFECTIVE_SETTINGS_H_
#define PINSHIM_ANALYZER_INEFFECTIVE_SETTINGS_H_

#include <functional>
#include <string>
#include <vector>

#include "shim/core/config.h"

namespace pinshim {

// What a setting needs before it does anything (config_keys.inc's column).
using Needs = ConfigNeeds;

// The need of each setting (kNothing for those that act in every mode).
Needs NeedsOf(ConfigKey key);

// One line per kind of need that `config` leaves unmet, naming the settings
// of that kind the user gave, as `name_of` names them ("--budget", or
// "PINSHIM_BUDGET" when it came from the environment; "" for a setting the
// user did not give, which is left out). Empty when every given setting acts.
std::vector<std::string> IneffectiveSettings(const Config& config,
                                             const std::function<std::string(ConfigKey)>& name_of);

}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_INEFFECTIVE_SETTINGS_H_
