// Prints pinshim's structure layout of each CPython version it reads, one
// "3.<minor> <field> <offset>" a line, for tests/trace/python_frames_test.py
// to compare with offsetof() compiled against each interpreter's headers.
#include <cstdio>

#include "shim/trace/python_frames.h"

int main() {
  for (int minor = 10; minor <= 13; ++minor) {
    const pinshim::trace::PythonLayout* l = pinshim::trace::PythonLayoutFor(minor);
    if (l == nullptr) return 1;
#define FIELD(name) std::printf("3.%d %s %d\n", minor, #name, static_cast<int>(l->name))
    FIELD(ts_interp);
    FIELD(ts_thread_id);
    FIELD(ts_frame);
    FIELD(cframe_current);
    FIELD(fr_previous);
    FIELD(fr_code);
    FIELD(fr_instr);
    FIELD(fr_owner);
    FIELD(fr_lineno);
    FIELD(owner_generator);
    FIELD(owner_cstack);
    FIELD(co_filename);
    FIELD(co_name);
    FIELD(co_firstlineno);
    FIELD(co_linetable);
    FIELD(co_code_adaptive);
    FIELD(co_firsttraceable);
    FIELD(ob_type);
    FIELD(ob_size);
    FIELD(bytes_data);
    FIELD(str_length);
    FIELD(str_state);
    FIELD(ascii_size);
    FIELD(compact_size);
#undef FIELD
  }
  return 0;
}
