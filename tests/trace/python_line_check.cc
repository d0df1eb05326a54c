// Checks pinshim's line-table decoder against an interpreter's own answers.
// Reads, from stdin, what tests/trace/python_frames_test.py has each
// interpreter print: "T <line table in hex> <first line>" per code object,
// then "<byte offset> <line>" per instruction (0: no line). Argument: 310
// for 3.10's table format, 311 for the location table of 3.11 and later.
// Prints one summary line; exits 1 on any mismatch or when nothing was read.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "shim/trace/python_frames.h"

int main(int argc, char** argv) {
  bool location_table = argc > 1 && std::strcmp(argv[1], "310") != 0;
  std::vector<uint8_t> table;
  int first = 0;
  long codes = 0, checked = 0, wrong = 0;
  std::string word;
  while (std::cin >> word) {
    if (word == "T") {
      std::string hex;
      std::cin >> hex >> first;
      table.clear();
      for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        table.push_back(static_cast<uint8_t>(std::strtoul(hex.substr(i, 2).c_str(), nullptr, 16)));
      }
      ++codes;
      continue;
    }
    int offset = std::atoi(word.c_str());
    int expected = 0;
    std::cin >> expected;
    int got = pinshim::trace::PythonLineFromTable(table.data(), table.size(), first, offset,
                                                  location_table);
    ++checked;
    if (got != expected) {
      if (++wrong <= 5) {
        std::printf("mismatch: first line %d, offset %d: decoded %d, interpreter says %d\n", first,
                    offset, got, expected);
      }
    }
  }
  std::printf("line tables: %ld instructions in %ld code objects checked, %ld mismatches\n",
              checked, codes, wrong);
  return wrong == 0 && checked > 0 ? 0 : 1;
}
