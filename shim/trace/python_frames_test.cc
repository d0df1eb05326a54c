// The Python frame reader on structures built here after each version's
// layout (the real interpreters are exercised by
// tests/trace/python_frames_test.py): line tables of both formats, the walk
// (skipped entry and unstarted frames, validation, bounds), thread states
// that are not this thread's, labels, code ids and the per-thread cache.
#include "shim/trace/python_frames.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace pinshim {
namespace trace {
namespace {

// Type objects: only their addresses matter.
uint64_t g_code_type[8], g_frame_type[8], g_unicode_type[8], g_bytes_type[8], g_other_type[8];

// Memory laid out as CPython's objects of one version.
class FakePython {
 public:
  explicit FakePython(int minor) : layout_(*PythonLayoutFor(minor)) {
    rt_.layout = layout_;
    rt_.types.code = reinterpret_cast<uintptr_t>(g_code_type);
    rt_.types.frame = reinterpret_cast<uintptr_t>(g_frame_type);
    rt_.types.unicode = reinterpret_cast<uintptr_t>(g_unicode_type);
    rt_.types.bytes = reinterpret_cast<uintptr_t>(g_bytes_type);
    rt_.this_thread_state = &ThisThreadState;
    rt_.main_interpreter = &MainInterpreter;
    current_ = this;
    main_interp_ = Block(64);
    tstate_ = Block(512);
    Put<uint64_t>(tstate_, layout_.ts_thread_id, static_cast<uint64_t>(pthread_self()));
    Put<uintptr_t>(tstate_, layout_.ts_interp, main_interp_);
    if (layout_.cframe_current >= 0) {
      cframe_ = Block(64);
      Put<uintptr_t>(tstate_, layout_.ts_frame, cframe_);
    }
    this_state_ = tstate_;
  }
  ~FakePython() { current_ = nullptr; }

  PythonRuntime& rt() { return rt_; }
  const PythonLayout& layout() const { return layout_; }
  uintptr_t tstate() const { return tstate_; }
  void set_this_state(uintptr_t s) { this_state_ = s; }
  uintptr_t main_interp() const { return main_interp_; }

  uintptr_t Block(size_t bytes) {
    blocks_.emplace_back(bytes / 8 + 1, 0);
    return reinterpret_cast<uintptr_t>(blocks_.back().data());
  }

  template <typename T>
  static void Put(uintptr_t base, int32_t offset, T v) {
    ASSERT_GE(offset, 0);
    memcpy(reinterpret_cast<void*>(base + static_cast<uintptr_t>(offset)), &v, sizeof(T));
  }

  // A compact str: ASCII, or UCS-2 / UCS-4 text.
  uintptr_t Str(const std::u32string& text) {
    bool ascii = true;
    unsigned kind = 1;
    for (char32_t c : text) {
      if (c >= 0x80) ascii = false;
      if (c > 0xff) kind = 2;
      if (c > 0xffff) kind = 4;
    }
    uintptr_t s = Block(static_cast<size_t>(layout_.compact_size) + 4 * text.size() + 8);
    Put<uintptr_t>(s, layout_.ob_type, rt_.types.unicode);
    Put<int64_t>(s, layout_.str_length, static_cast<int64_t>(text.size()));
    uint32_t state = (kind << 2) | (1u << 5) | (ascii ? 1u << 6 : 0u);
    Put<uint32_t>(s, layout_.str_state, state);
    uintptr_t data = s + static_cast<uintptr_t>(ascii ? layout_.ascii_size : layout_.compact_size);
    for (size_t i = 0; i < text.size(); ++i) {
      if (kind == 1) Put<uint8_t>(data, static_cast<int32_t>(i), static_cast<uint8_t>(text[i]));
      if (kind == 2)
        Put<uint16_t>(data, static_cast<int32_t>(2 * i), static_cast<uint16_t>(text[i]));
      if (kind == 4)
        Put<uint32_t>(data, static_cast<int32_t>(4 * i), static_cast<uint32_t>(text[i]));
    }
    return s;
  }

  uintptr_t Bytes(const std::vector<uint8_t>& b) {
    uintptr_t o = Block(static_cast<size_t>(layout_.bytes_data) + b.size() + 8);
    Put<uintptr_t>(o, layout_.ob_type, rt_.types.bytes);
    Put<int64_t>(o, layout_.ob_size, static_cast<int64_t>(b.size()));
    memcpy(reinterpret_cast<void*>(o + static_cast<uintptr_t>(layout_.bytes_data)), b.data(),
           b.size());
    return o;
  }

  // A code object whose instruction i (a code unit of 2 bytes) is on line
  // first_line + i: a line table with one entry per instruction.
  uintptr_t Code(const std::u32string& file, const std::u32string& name, int first_line,
                 int units = 64, int first_traceable = 0) {
    std::vector<uint8_t> table;
    for (int i = 0; i < units; ++i) {
      if (layout_.location_table) {
        // Code 11: one line further, one code unit; the first one: code 10.
        table.push_back(static_cast<uint8_t>(0x80 | ((i == 0 ? 10 : 11) << 3) | 0));
        table.push_back(0);  // a column byte, skipped
        table.push_back(1);
      } else {
        table.push_back(2);               // 2 bytes
        table.push_back(i == 0 ? 0 : 1);  // +1 line
      }
    }
    uintptr_t code =
        Block(static_cast<size_t>(layout_.co_code_adaptive > 0 ? layout_.co_code_adaptive : 256) +
              static_cast<size_t>(2 * units) + 64);
    Put<uintptr_t>(code, layout_.ob_type, rt_.types.code);
    Put<int64_t>(code, layout_.ob_size, units);
    Put<uintptr_t>(code, layout_.co_filename, Str(file));
    Put<uintptr_t>(code, layout_.co_name, Str(name));
    Put<int32_t>(code, layout_.co_firstlineno, first_line);
    Put<uintptr_t>(code, layout_.co_linetable, Bytes(table));
    if (layout_.co_firsttraceable >= 0)
      Put<int32_t>(code, layout_.co_firsttraceable, first_traceable);
    return code;
  }

  // A frame running instruction `unit` of `code`, linked to `previous`.
  uintptr_t Frame(uintptr_t code, int unit, uintptr_t previous, int owner = 0) {
    uintptr_t f = Block(256);
    Put<uintptr_t>(f, layout_.fr_previous, previous);
    Put<uintptr_t>(f, layout_.fr_code, code);
    if (layout_.frame_objects) {
      Put<uintptr_t>(f, layout_.ob_type, rt_.types.frame);
      Put<int32_t>(f, layout_.fr_instr, unit);
    } else {
      Put<uintptr_t>(f, layout_.fr_instr,
                     code + static_cast<uintptr_t>(layout_.co_code_adaptive) +
                         static_cast<uintptr_t>(2 * unit));
      Put<uint8_t>(f, layout_.fr_owner, static_cast<uint8_t>(owner));
    }
    return f;
  }

  void SetInnermost(uintptr_t frame) { SetInnermostOf(tstate_, frame); }
  void SetInnermostOf(uintptr_t ts, uintptr_t frame) {
    if (layout_.cframe_current >= 0) {
      uintptr_t cf = Load(ts, layout_.ts_frame);
      Put<uintptr_t>(cf, layout_.cframe_current, frame);
    } else {
      Put<uintptr_t>(ts, layout_.ts_frame, frame);
    }
  }

  // Another thread state of this thread (a subinterpreter's).
  uintptr_t NewThreadState(uintptr_t interp) {
    uintptr_t ts = Block(512);
    Put<uint64_t>(ts, layout_.ts_thread_id, static_cast<uint64_t>(pthread_self()));
    Put<uintptr_t>(ts, layout_.ts_interp, interp);
    if (layout_.cframe_current >= 0) Put<uintptr_t>(ts, layout_.ts_frame, Block(64));
    return ts;
  }

  static uintptr_t Load(uintptr_t base, int32_t offset) {
    uintptr_t v;
    memcpy(&v, reinterpret_cast<void*>(base + static_cast<uintptr_t>(offset)), sizeof(v));
    return v;
  }

  static void* ThisThreadState() { return reinterpret_cast<void*>(current_->this_state_); }
  static void* MainInterpreter() { return reinterpret_cast<void*>(current_->main_interp_); }
  static void* CurrentState() { return reinterpret_cast<void*>(current_->current_state_); }
  void set_current_state(uintptr_t s) {
    current_state_ = s;
    rt_.current_thread_state = &CurrentState;
  }

 private:
  static FakePython* current_;
  PythonLayout layout_;
  PythonRuntime rt_;
  std::deque<std::vector<uint64_t>> blocks_;
  uintptr_t main_interp_ = 0, tstate_ = 0, cframe_ = 0, this_state_ = 0, current_state_ = 0;
};
FakePython* FakePython::current_ = nullptr;

struct Codes : PythonCodeSink {
  std::map<uint32_t, std::string> names;
  int calls = 0;
  void NewCode(uint32_t id, const PythonCodeInfo& info) override {
    ++calls;
    names[id] = std::string(info.function, info.function_len) + "@" +
                std::string(info.file, info.file_len) + ":" + std::to_string(info.first_line);
  }
};

struct Capture {
  PythonCodeTable table;
  PythonLineCache cache{};
  PythonRawFrame raw[kMaxPythonFrames];
  PythonCodeInfo info;
  PythonStack stack;
  Codes codes;
  Capture() { EXPECT_TRUE(table.Init(8)); }
  void Run(const PythonRuntime* rt, uint32_t epoch = 1) {
    CapturePythonStack(rt, &cache, &table, epoch, raw, &info, &stack, &codes);
  }
  std::string Frame(int i) {
    uint32_t id = static_cast<uint32_t>(stack.frames[i] >> 32);
    return codes.names[id] + " line " + std::to_string(stack.frames[i] & 0xffffffffu);
  }
};

class EachVersion : public ::testing::TestWithParam<int> {};

TEST_P(EachVersion, ReadsTheChainInnermostFirstWithLines) {
  FakePython py(GetParam());
  uintptr_t outer = py.Code(U"/app/train.py", U"main", 100);
  uintptr_t inner = py.Code(U"/app/train.py", U"step", 10);
  uintptr_t lib = py.Code(U"/usr/lib/python3/site-packages/torch/x.py", U"copy_", 1000);
  uintptr_t f0 = py.Frame(outer, 5, 0);
  uintptr_t f1 = py.Frame(inner, 3, f0);
  uintptr_t f2 = py.Frame(lib, 0, f1);
  py.SetInnermost(f2);
  Capture c;
  c.Run(&py.rt());
  ASSERT_EQ(c.stack.status, PythonStatus::kFrames);
  ASSERT_EQ(c.stack.depth, 3);
  EXPECT_EQ(c.stack.omitted, 0u);
  EXPECT_EQ(c.Frame(0), "copy_@/usr/lib/python3/site-packages/torch/x.py:1000 line 1000");
  EXPECT_EQ(c.Frame(1), "step@/app/train.py:10 line 13");
  EXPECT_EQ(c.Frame(2), "main@/app/train.py:100 line 105");
  EXPECT_EQ(c.codes.calls, 3);
  // Again: the same ids, from the line cache, and no code object twice.
  PythonStack first = c.stack;
  c.Run(&py.rt());
  ASSERT_EQ(c.stack.depth, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.stack.frames[i], first.frames[i]);
  EXPECT_EQ(c.codes.calls, 3);
  // A new epoch (a new trace) names them again.
  c.Run(&py.rt(), 2);
  EXPECT_EQ(c.codes.calls, 6);
}

TEST_P(EachVersion, NoThreadStateAndForeignStates) {
  FakePython py(GetParam());
  Capture c;
  py.set_this_state(0);
  c.Run(&py.rt());
  EXPECT_EQ(c.stack.status, PythonStatus::kNoThreadState);
  EXPECT_EQ(c.stack.depth, 0);
  // A state whose thread id is another thread's is never walked.
  uintptr_t other = py.NewThreadState(py.main_interp());
  FakePython::Put<uint64_t>(other, py.layout().ts_thread_id, 12345);
  py.SetInnermostOf(other, py.Frame(py.Code(U"a.py", U"f", 1), 0, 0));
  py.set_this_state(other);
  c.Run(&py.rt());
  EXPECT_EQ(c.stack.status, PythonStatus::kInvalid);
  EXPECT_EQ(c.stack.depth, 0);
}

TEST_P(EachVersion, SubinterpreterStatesAreLabelled) {
  FakePython py(GetParam());
  uintptr_t sub = py.NewThreadState(py.Block(64));
  py.SetInnermostOf(sub, py.Frame(py.Code(U"<string>", U"copy_in_sub", 7), 2, 0));
  py.set_this_state(sub);
  Capture c;
  c.Run(&py.rt());
  EXPECT_EQ(c.stack.status, PythonStatus::kSubinterpreter);
  ASSERT_EQ(c.stack.depth, 1);
  EXPECT_EQ(c.Frame(0), "copy_in_sub@<string>:7 line 9");
}

TEST_P(EachVersion, AFrameThatFailsValidationEndsTheWalk) {
  FakePython py(GetParam());
  uintptr_t good = py.Code(U"a.py", U"good", 1);
  uintptr_t bad = py.Code(U"a.py", U"bad", 1);
  FakePython::Put<uintptr_t>(bad, py.layout().ob_type, reinterpret_cast<uintptr_t>(g_other_type));
  uintptr_t outer = py.Frame(good, 0, 0);
  uintptr_t broken = py.Frame(bad, 0, outer);
  uintptr_t inner = py.Frame(good, 1, broken);
  py.SetInnermost(inner);
  Capture c;
  c.Run(&py.rt());
  EXPECT_EQ(c.stack.status, PythonStatus::kInvalid);
  ASSERT_EQ(c.stack.depth, 1);
  EXPECT_EQ(c.Frame(0), "good@a.py:1 line 2");
  // A misaligned or null-page frame pointer too.
  FakePython::Put<uintptr_t>(inner, py.layout().fr_previous, 0x1001);
  c.Run(&py.rt());
  EXPECT_EQ(c.stack.status, PythonStatus::kInvalid);
  EXPECT_EQ(c.stack.depth, 1);
}

TEST_P(EachVersion, CyclesAndDeepChainsAreBounded) {
  FakePython py(GetParam());
  uintptr_t code = py.Code(U"a.py", U"f", 1);
  // A frame whose previous is itself: the walk stops after kMaxPythonHops.
  uintptr_t loop = py.Frame(code, 0, 0);
  FakePython::Put<uintptr_t>(loop, py.layout().fr_previous, loop);
  py.SetInnermost(loop);
  Capture c;
  c.Run(&py.rt());
  EXPECT_EQ(c.stack.status, PythonStatus::kInvalid);
  EXPECT_EQ(c.stack.depth, kMaxPythonFrames);
  EXPECT_EQ(c.stack.omitted, static_cast<uint32_t>(kMaxPythonHops - kMaxPythonFrames));
  // A chain deeper than kMaxPythonFrames keeps the innermost ones.
  uintptr_t f = 0;
  for (int i = 0; i < kMaxPythonFrames + 10; ++i) f = py.Frame(code, i % 60, f);
  py.SetInnermost(f);
  c.Run(&py.rt());
  EXPECT_EQ(c.stack.status, PythonStatus::kFrames);
  EXPECT_EQ(c.stack.depth, kMaxPythonFrames);
  EXPECT_EQ(c.stack.omitted, 10u);
  EXPECT_EQ(c.stack.frames[0] & 0xffffffffu,
            static_cast<uint64_t>(1 + (kMaxPythonFrames + 9) % 60));
}

INSTANTIATE_TEST_SUITE_P(Python3, EachVersion, ::testing::Values(10, 11, 12, 13),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return "v3_" + std::to_string(i.param);
                         });

TEST(PythonFrames, InstructionOutsideTheCodeIsInvalid) {
  // 3.11 on: the frame points into its code object (3.10 stores an index).
  for (int minor : {11, 12, 13}) {
    FakePython py(minor);
    uintptr_t code = py.Code(U"a.py", U"f", 1, 16);
    uintptr_t f = py.Frame(code, 400, 0);  // far past the 16 code units
    py.SetInnermost(f);
    Capture c;
    c.Run(&py.rt());
    EXPECT_EQ(c.stack.status, PythonStatus::kInvalid) << minor;
    EXPECT_EQ(c.stack.depth, 0) << minor;
  }
}

TEST(PythonFrames, EntryFramesAndUnstartedFramesAreSkipped) {
  for (int minor : {12, 13}) {
    FakePython py(minor);
    uintptr_t code = py.Code(U"a.py", U"f", 1, 64, /*first_traceable=*/4);
    uintptr_t outer = py.Frame(code, 10, 0);
    uintptr_t entry =
        py.Frame(py.Code(U"", U"<trampoline>", 0), 0, outer, py.layout().owner_cstack);
    uintptr_t unstarted = py.Frame(code, 2, entry);         // before its first RESUME
    uintptr_t generator = py.Frame(code, 1, unstarted, 1);  // a generator's: counted
    py.SetInnermost(generator);
    Capture c;
    c.Run(&py.rt());
    ASSERT_EQ(c.stack.status, PythonStatus::kFrames) << minor;
    ASSERT_EQ(c.stack.depth, 2) << minor;
    EXPECT_EQ(c.stack.frames[0] & 0xffffffffu, 2u);
    EXPECT_EQ(c.stack.frames[1] & 0xffffffffu, 11u);
  }
}

TEST(PythonFrames, CurrentStateOfThisThreadWinsFrom312) {
  FakePython py(12);
  py.SetInnermost(py.Frame(py.Code(U"main.py", U"enter", 1), 0, 0));
  uintptr_t sub = py.NewThreadState(py.Block(64));
  py.SetInnermostOf(sub, py.Frame(py.Code(U"<string>", U"inside", 5), 0, 0));
  py.set_current_state(sub);
  Capture c;
  c.Run(&py.rt());
  EXPECT_EQ(c.stack.status, PythonStatus::kSubinterpreter);
  ASSERT_EQ(c.stack.depth, 1);
  EXPECT_EQ(c.Frame(0), "inside@<string>:5 line 5");
  py.set_current_state(0);  // the GIL released: the bound state
  c.Run(&py.rt());
  EXPECT_EQ(c.stack.status, PythonStatus::kFrames);
  EXPECT_EQ(c.Frame(0), "enter@main.py:1 line 1");
}

TEST(PythonFrames, LabelsWithoutReading) {
  FakePython py(13);
  py.rt().fixed = PythonStatus::kFreeThreaded;
  Capture c;
  c.Run(&py.rt());
  EXPECT_EQ(c.stack.status, PythonStatus::kFreeThreaded);
  EXPECT_EQ(c.stack.depth, 0);
  py.rt().fixed = PythonStatus::kFrames;
  py.rt().is_finalizing = [] { return 1; };
  c.Run(&py.rt());
  EXPECT_EQ(c.stack.status, PythonStatus::kFinalizing);
  c.Run(nullptr);
  EXPECT_EQ(c.stack.status, PythonStatus::kNone);
}

TEST(PythonFrames, NonAsciiNamesBecomeUtf8) {
  FakePython py(11);
  uintptr_t code = py.Code(U"/data/\u00fcber.py", U"\u65e5\u672c_\U0001F600", 3);
  PythonCodeInfo info;
  ASSERT_TRUE(ReadPythonCode(py.rt(), code, &info));
  EXPECT_EQ(std::string(info.file, info.file_len),
            "/data/\xc3\xbc"
            "ber.py");
  EXPECT_EQ(std::string(info.function, info.function_len),
            "\xe6\x97\xa5\xe6\x9c\xac_\xf0\x9f\x98\x80");
  EXPECT_EQ(info.first_line, 3);
  // A non-string name is refused, not read.
  FakePython::Put<uintptr_t>(code, py.layout().co_name, py.Bytes({1, 2, 3}));
  EXPECT_FALSE(ReadPythonCode(py.rt(), code, &info));
}

TEST(PythonFrames, CodeTableIdsAndReuse) {
  PythonCodeTable t;
  ASSERT_TRUE(t.Init(6));
  bool is_new;
  uint32_t a = t.Intern(0x1000, 7, 1, &is_new);
  EXPECT_TRUE(is_new);
  EXPECT_EQ(t.Intern(0x1000, 7, 1, &is_new), a);
  EXPECT_FALSE(is_new);
  // A freed code object's address reused by another: a new id.
  uint32_t b = t.Intern(0x1000, 8, 1, &is_new);
  EXPECT_TRUE(is_new);
  EXPECT_NE(a, b);
  EXPECT_NE(t.Intern(0x1000, 7, 2, &is_new), a);  // another epoch
  t.Reset();
  EXPECT_EQ(t.Intern(0x2000, 1, 1, &is_new), 1u);
  // Full: 0, never a wrong id.
  int zeros = 0;
  for (uintptr_t i = 0; i < 200; ++i) zeros += t.Intern(0x10000 + i * 8, 1, 1, &is_new) == 0;
  EXPECT_GT(zeros, 0);
}

// --- Line tables --------------------------------------------------------------

TEST(PythonLines, Pep626Table) {
  // 3.10: (bytes, line delta) pairs; -128: no line.
  const uint8_t table[] = {6, 0, 4, 2, 2, 0x80, 8, 0xff};
  EXPECT_EQ(PythonLineFromTable(table, sizeof(table), 10, -1, false), 10);
  EXPECT_EQ(PythonLineFromTable(table, sizeof(table), 10, 0, false), 10);
  EXPECT_EQ(PythonLineFromTable(table, sizeof(table), 10, 5, false), 10);
  EXPECT_EQ(PythonLineFromTable(table, sizeof(table), 10, 6, false), 12);
  EXPECT_EQ(PythonLineFromTable(table, sizeof(table), 10, 10, false), 0);  // no line
  EXPECT_EQ(PythonLineFromTable(table, sizeof(table), 10, 12, false), 11);
  EXPECT_EQ(PythonLineFromTable(table, sizeof(table), 10, 19, false), 11);
  EXPECT_EQ(PythonLineFromTable(table, sizeof(table), 10, 20, false), 0);  // past the end
}

TEST(PythonLines, LocationTable) {
  // 3.11+: short form (same line, 2 units); one-line form +2 (1 unit);
  // no-column form with delta -3 (3 units); long form +5 (1 unit); none
  // (2 units).
  const uint8_t table[] = {
      0x80 | (0 << 3) | 1,  0x05,               // short form, 2 units, a column byte
      0x80 | (12 << 3) | 0, 3,        4,        // +2, 1 unit, two column bytes
      0x80 | (13 << 3) | 2, 7,                  // varint 7: -3, 3 units
      0x80 | (14 << 3) | 0, 10,       0, 1, 2,  // varint 10: +5, then end line, columns
      0x80 | (15 << 3) | 1,                     // no location, 2 units
      0x80 | (13 << 3) | 0, 0x40 | 2, 1,        // varint 2 + (1 << 6) = 66: +33
  };
  auto line = [&](int unit) {
    return PythonLineFromTable(table, sizeof(table), 20, 2 * unit, true);
  };
  EXPECT_EQ(line(0), 20);
  EXPECT_EQ(line(1), 20);
  EXPECT_EQ(line(2), 22);
  EXPECT_EQ(line(3), 19);
  EXPECT_EQ(line(5), 19);
  EXPECT_EQ(line(6), 24);
  EXPECT_EQ(line(7), 0);
  EXPECT_EQ(line(8), 0);
  EXPECT_EQ(line(9), 57);
  EXPECT_EQ(line(10), 0);  // past the end
  EXPECT_EQ(PythonLineFromTable(table, sizeof(table), 20, -2, true), 20);
  // A truncated varint or a table that does not start an entry: no line.
  const uint8_t cut[] = {0x80 | (13 << 3), 0x41};
  EXPECT_EQ(PythonLineFromTable(cut, sizeof(cut), 5, 0, true), 0);
  const uint8_t junk[] = {0x01, 0x02};
  EXPECT_EQ(PythonLineFromTable(junk, sizeof(junk), 5, 0, true), 0);
}

// --- 3.13's debug offsets -------------------------------------------------------

PythonDebugOffsets313 OffsetsOf(const PythonLayout& l) {
  PythonDebugOffsets313 d;
  memset(&d, 0, sizeof(d));
  memcpy(d.cookie, "xdebugpy", 8);
  d.version = 0x030d00f0;
  d.thread_state.interp = static_cast<uint64_t>(l.ts_interp);
  d.thread_state.current_frame = static_cast<uint64_t>(l.ts_frame);
  d.thread_state.thread_id = static_cast<uint64_t>(l.ts_thread_id);
  d.interpreter_frame.previous = static_cast<uint64_t>(l.fr_previous);
  d.interpreter_frame.executable = static_cast<uint64_t>(l.fr_code);
  d.interpreter_frame.instr_ptr = static_cast<uint64_t>(l.fr_instr);
  d.interpreter_frame.owner = static_cast<uint64_t>(l.fr_owner);
  d.code_object.filename = static_cast<uint64_t>(l.co_filename);
  d.code_object.qualname = static_cast<uint64_t>(l.co_name);
  d.code_object.linetable = static_cast<uint64_t>(l.co_linetable);
  d.code_object.firstlineno = static_cast<uint64_t>(l.co_firstlineno);
  d.code_object.co_code_adaptive = static_cast<uint64_t>(l.co_code_adaptive);
  d.pyobject.ob_type = static_cast<uint64_t>(l.ob_type);
  return d;
}

TEST(PythonDebugOffsets, FreeThreadedAndOtherLayoutsAreNotRead) {
  const PythonLayout& l = *PythonLayoutFor(13);
  PythonDebugOffsets313 d = OffsetsOf(l);
  EXPECT_EQ(ClassifyDebugOffsets313(d, 0x030d00f0, l), PythonStatus::kFrames);
  EXPECT_EQ(ClassifyDebugOffsets313(d, 0x030e00f0, l), PythonStatus::kUnsupported);
  PythonDebugOffsets313 ft = d;
  ft.free_threaded = 1;
  ft.pyobject.ob_type = 24;  // the free-threaded object header
  EXPECT_EQ(ClassifyDebugOffsets313(ft, 0x030d00f0, l), PythonStatus::kFreeThreaded);
  PythonDebugOffsets313 other = d;
  other.code_object.co_code_adaptive += 8;
  EXPECT_EQ(ClassifyDebugOffsets313(other, 0x030d00f0, l), PythonStatus::kUnsupported);
  PythonDebugOffsets313 junk = d;
  junk.cookie[0] = 'y';
  EXPECT_EQ(ClassifyDebugOffsets313(junk, 0x030d00f0, l), PythonStatus::kUnsupported);
}

TEST(PythonLayouts, KnownVersionsOnly) {
  for (int minor = 0; minor < 20; ++minor) {
    EXPECT_EQ(PythonLayoutFor(minor) != nullptr, minor >= 10 && minor <= 13) << minor;
  }
  EXPECT_TRUE(PythonLayoutFor(10)->frame_objects);
  EXPECT_FALSE(PythonLayoutFor(10)->location_table);
  EXPECT_TRUE(PythonLayoutFor(11)->location_table);
}

TEST(PythonCodeRecord, EncodesFileFunctionAndFirstLine) {
  PythonCodeInfo info;
  memcpy(info.file, "a.py", 4);
  info.file_len = 4;
  memcpy(info.function, "f", 1);
  info.function_len = 1;
  info.first_line = 300;
  uint8_t out[kMaxPythonCodePayload];
  size_t n = EncodePythonCode(9, info, out);
  const uint8_t expected[] = {9, 4, 'a', '.', 'p', 'y', 1, 'f', 0xac, 0x02};
  ASSERT_EQ(n, sizeof(expected));
  EXPECT_EQ(memcmp(out, expected, n), 0);
}

}  // namespace
}  // namespace trace
}  // namespace pinshim
