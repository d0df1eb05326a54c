// Help text shared by the pinshim commands, generated from the configuration
// table so that help and library never disagree about a variable.
#ifndef PINSHIM_ANALYZER_HELP_H_
#define PINSHIM_ANALYZER_HELP_H_

#include <cstdio>
#include <string>

namespace pinshim {

// Writes text word-wrapped to width columns, every line indented by indent.
void PrintWrapped(FILE* out, const std::string& text, int indent, int width);

// Writes "  head   text": text starting in column 27 (on the next line when
// head is longer), wrapped at 79 columns.
void PrintOptionLine(FILE* out, const std::string& head, const std::string& text);

// Writes the description of every PINSHIM_ variable, including
// PINSHIM_CONFIG and PINSHIM_LIBRARY, and the config file format.
void PrintVariables(FILE* out);

}  // namespace pinshim

#endif  // PINSHIM_ANALYZER_HELP_H_
