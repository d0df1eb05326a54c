// `pinshim fleet`: runs the fleet analysis (analyzer/fleet/pinshim_fleet),
// a Python program on Dask, under an interpreter that has dask, distributed
// and pandas: $PINSHIM_PYTHON when set, else /usr/bin/python3 (where
// Debian's python3-dask installs), else python3 on PATH. The program reads
// its own options (pinshim fleet --help; docs/fleet.md).
#ifndef PINSHIM_ANALYZER_FLEET_COMMAND_H_
#define PINSHIM_ANALYZER_FLEET_COMMAND_H_

#include <string>
#include <vector>

namespace pinshim {

// The environment variable that names the interpreter.
constexpr const char kFleetPythonVariable[] = "PINSHIM_PYTHON";

// Folders tried for the Python package pinshim_fleet of a pinshim binary at
// exe_path (resolved), in order:
//   <exe_dir>/../lib/pinshim-fleet                  a prefix, the release
//                                                   archive, the wheel
//   <exe_dir>/../lib/<triplet>/pinshim/fleet        the Debian package
//   <exe_path>.runfiles/pinshim/analyzer/fleet      Bazel runfiles
//   <exe_dir>/fleet                                 one flat folder
//   $RUNFILES_DIR/pinshim/analyzer/fleet            another target's runfiles
std::vector<std::string> FleetCandidates(const std::string& exe_path);

// argv[0] is the command's own name ("fleet"). Replaces the process with
// the interpreter; returns 2 with a line on stderr when it cannot.
int RunFleetCommand(int argc, char** argv);

}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_FLEET_COMMAND_H_
