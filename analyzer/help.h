// Help text shared by the pinshim commands, generated from the configuration
// table so that help and library never disagree about a variable.
#ifndef PINSHIM_ANALYZER_HELP_H_
#define PINSHIM_ANALYZER_HELP_H_

#include <cstdio>
#include <string>

namespace pinshim {

// Writes text word-wrapped to width columns, every line indented by indent.
void PrintWrapped(FILE* out, const std::string& text, int indent, int width);

// Writes the description of every PINSHIM_ variable, including
// PINSHIM_CONFIG and PINSHIM_LIBRARY, and the config file format.
void PrintVariables(FILE* out);

}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_HELP_H_
