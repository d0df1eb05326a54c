#include "analyzer/report/export.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "analyzer/report/analysis.h"
#include "tests/trace/trace_builder.h"

namespace pinshim {
namespace report {
namespace {

using testing::BuilderModule;
using testing::BuilderProcess;
using testing::TraceBuilder;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kT0 = 5000000000ull;

std::vector<BuilderModule> Modules(const std::string& app_build_id) {
  return {{"/opt/app/bin/app", app_build_id, 0x10000, 0x11000, 0x1000},
          {"/opt/pinshim/lib/libpinshim.so", "\x99\x98", 0x20000, 0x21000, 0x1000},
          {"/opt/app/lib/libnoid.so", "", 0x40000, 0x41000, 0x1000}};
}

// A process that copies `copies` pageable buffers of 1 MiB to the device at
// stack 1 (in the app) and pins 2 MiB at stack 2 (in a library without a
// build id).
ProcessReport Process(uint64_t pid, const std::string& app_build_id, int copies,
                      std::string* bytes) {
  TraceBuilder b;
  BuilderProcess p;
  p.pid = pid;
  p.start_ns = kT0 + pid;
  b.Process(p);
  b.Modules(0, Modules(app_build_id));
  b.Stack(1, 0, {0x21050, 0x11500});
  b.Stack(2, 0, {0x21050, 0x41200});
  uint64_t t = kT0 + 1000;
  PinEvent pin{};
  pin.op = PinOp::kAlloc;
  pin.ptr = reinterpret_cast<void*>(0x7e0000000000);
  pin.bytes = 2 * kMiB;
  pin.start_ns = t;
  pin.end_ns = t + 500;
  b.batch().AppendPin(pin, 2, 0);
  for (int i = 0; i < copies; ++i) {
    CopyEvent e{};
    e.dir = CopyDir::kHostToDevice;
    e.src_kind = MemKind::kPageable;
    e.dst_kind = MemKind::kDevice;
    e.bytes = kMiB;
    e.host_ptr = reinterpret_cast<void*>(0x7f0000000000);
    e.start_ns = t += 2000;
    e.end_ns = t + 1000;
    b.MakeRoom(1);
    b.batch().AppendCopy(e, 1, 0);
  }
  b.Flush(1);
  b.End(t + 5000);
  *bytes = b.bytes();
  TraceReader r;
  std::string error;
  EXPECT_TRUE(r.OpenBuffer(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(), &error))
      << error;
  AnalysisOptions o;
  o.site_tables = true;
  return AnalyzeTrace(r, o);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    out.push_back(text.substr(pos, nl - pos));
  }
  return out;
}

std::string Field(const std::string& row, const std::string& key) {
  const std::string head = "\"" + key + "\":";
  size_t at = row.find(head);
  if (at == std::string::npos) return "<none>";
  at += head.size();
  const size_t end = row.find_first_of(",}", row[at] == '"' ? row.find('"', at + 1) : at);
  return row.substr(at, end - at);
}

// The same line in two processes is one key; the processes are two.
TEST(Export, SameSiteInTwoProcessesIsOneKey) {
  std::string b1, b2;
  std::vector<ProcessReport> ps;
  ps.push_back(Process(100, "\xaa\x01", 3, &b1));
  ps.push_back(Process(200, "\xaa\x01", 5, &b2));
  auto tables = ExportTables(ps, {{"/x/bad.pstrace", "not a trace"}}, "model");
  const std::vector<std::string> copies = Lines(tables["copies.jsonl"]);
  ASSERT_EQ(copies.size(), 2u) << tables["copies.jsonl"];
  EXPECT_EQ(Field(copies[0], "site"), Field(copies[1], "site"));
  EXPECT_EQ(Field(copies[0], "site").substr(0, 2), "\"n");
  EXPECT_NE(Field(copies[0], "process"), Field(copies[1], "process"));
  EXPECT_EQ(Field(copies[0], "copies"), "3");
  EXPECT_EQ(Field(copies[1], "bytes"), std::to_string(5 * kMiB));
  EXPECT_EQ(Field(copies[1], "memory"), "\"pageable\"");
  // One definition per site: the copy site and the pinning site.
  const std::vector<std::string> sites = Lines(tables["sites.jsonl"]);
  ASSERT_EQ(sites.size(), 2u) << tables["sites.jsonl"];
  const std::vector<std::string> pinned = Lines(tables["pinned_sites.jsonl"]);
  ASSERT_EQ(pinned.size(), 2u);
  // A module without a build id: keyed by its name and offset.
  EXPECT_EQ(Field(pinned[0], "site").substr(0, 2), "\"m");
  EXPECT_EQ(Field(pinned[0], "bytes"), std::to_string(2 * kMiB));
  EXPECT_EQ(Lines(tables["processes.jsonl"]).size(), 2u);
  EXPECT_EQ(Field(Lines(tables["problems.jsonl"])[0], "trace"), "\"/x/bad.pstrace\"");
  EXPECT_NE(tables["manifest.json"].find("\"version\": 1"), std::string::npos);
}

// Another build of the program is another site, though at the same offset.
TEST(Export, AnotherBuildIsAnotherSite) {
  std::string b1, b2;
  std::vector<ProcessReport> ps;
  ps.push_back(Process(100, "\xaa\x01", 1, &b1));
  ps.push_back(Process(200, "\xbb\x02", 1, &b2));
  auto tables = ExportTables(ps, {}, "model");
  const std::vector<std::string> copies = Lines(tables["copies.jsonl"]);
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_NE(Field(copies[0], "site"), Field(copies[1], "site"));
}

TEST(Export, PythonSitesAreKeyedByFileAndLine) {
  Site a;
  a.known = true;
  a.site_index = 0;
  Frame f;
  f.python = true;
  f.file = "/srv/train.py";
  f.line = 12;
  f.function = "step";
  a.stack = {f};
  Site b = a;
  b.stack[0].function = "step_renamed";
  EXPECT_EQ(SiteKey(a, ""), SiteKey(b, ""));
  EXPECT_EQ(SiteKey(a, "").substr(0, 1), "y");
  b.stack[0].line = 13;
  EXPECT_NE(SiteKey(a, ""), SiteKey(b, ""));
  EXPECT_EQ(SiteKey(Site(), ""), "");
}

// However long the process, the series has at most kMaxBuckets points, and
// the peak survives the merging.
TEST(Export, PinnedSeriesIsBounded) {
  PinnedSeries s;
  s.Begin(1000);
  for (uint64_t i = 0; i < 200000; ++i) s.Note(1000 + i * 50000000ull, i == 123457 ? 99 : i % 7);
  const auto points = s.Points();
  EXPECT_LE(points.size(), PinnedSeries::kMaxBuckets);
  EXPECT_GE(points.size(), PinnedSeries::kMaxBuckets / 2);
  uint64_t peak = 0;
  for (const auto& p : points) peak = std::max(peak, p.second);
  EXPECT_EQ(peak, 99u);
}

std::string TestDir() {
  const char* tmp = getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

TEST(Export, WritesTablesAndRefusesALinkedDirectory) {
  std::string b1;
  std::vector<ProcessReport> ps;
  ps.push_back(Process(100, "\xaa\x01", 2, &b1));
  const auto tables = ExportTables(ps, {}, "model");
  const std::string dir = TestDir() + "/export-out";
  std::string error;
  ASSERT_TRUE(WriteExport(dir, tables, &error)) << error;
  std::ifstream in(dir + "/copies.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(Field(line, "copies"), "2");
  const std::string link = TestDir() + "/export-link";
  unlink(link.c_str());
  ASSERT_EQ(symlink(dir.c_str(), link.c_str()), 0);
  EXPECT_FALSE(WriteExport(link, tables, &error));
  EXPECT_NE(error.find("symbolic link"), std::string::npos) << error;
}

}  // namespace
}  // namespace report
}  // namespace pinshim
