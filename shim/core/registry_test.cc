#include "shim/core/registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <iterator>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace pinshim {
namespace {

Region Make(uintptr_t start, uint64_t bytes, uint64_t id, MemKind kind = MemKind::kPageable) {
  Region r;
  r.start = start;
  r.bytes = bytes;
  r.id = id;
  r.kind = kind;
  return r;
}

TEST(RegistryTest, LookupFindsContainingRangeOnly) {
  Registry reg;
  ASSERT_TRUE(reg.Insert(Make(0x10000, 0x1000, 1, MemKind::kPinnedByProgram)));
  Region r;
  EXPECT_TRUE(reg.Lookup(0x10000, &r));
  EXPECT_EQ(r.id, 1u);
  EXPECT_EQ(r.kind, MemKind::kPinnedByProgram);
  EXPECT_TRUE(reg.Lookup(0x10fff, &r));
  EXPECT_FALSE(reg.Lookup(0x11000, &r));
  EXPECT_FALSE(reg.Lookup(0xffff, &r));
}

TEST(RegistryTest, RemoveNeedsExactStart) {
  Registry reg;
  reg.Insert(Make(0x20000, 0x100, 7));
  EXPECT_FALSE(reg.Remove(0x20001, nullptr));
  Region out;
  EXPECT_TRUE(reg.Remove(0x20000, &out));
  EXPECT_EQ(out.id, 7u);
  EXPECT_EQ(reg.size(), 0u);
  EXPECT_FALSE(reg.Lookup(0x20000, nullptr));
}

TEST(RegistryTest, InsertReplacesStaleOverlaps) {
  Registry reg;
  reg.Insert(Make(0x1000, 0x3000, 1));
  reg.Insert(Make(0x2000, 0x100, 2));
  Region r;
  ASSERT_TRUE(reg.Lookup(0x2000, &r));
  EXPECT_EQ(r.id, 2u);
  // The old range was cut, not lost: its pieces outside the new one remain.
  ASSERT_TRUE(reg.Lookup(0x1000, &r));
  EXPECT_EQ(r.id, 1u);
  ASSERT_TRUE(reg.Lookup(0x3fff, &r));
  EXPECT_EQ(r.id, 1u);
}

TEST(RegistryTest, RemoveSpanTrimsAndReportsParts) {
  Registry reg;
  reg.Insert(Make(0x10000, 0x4000, 1));
  reg.Insert(Make(0x20000, 0x1000, 2));
  reg.Insert(Make(0x30000, 0x1000, 3));
  std::vector<Region> parts;
  size_t touched = reg.RemoveSpan(
      0x12000, 0x1f000,
      [](void* arg, const Region& part) {
        static_cast<std::vector<Region>*>(arg)->push_back(part);
      },
      &parts);
  EXPECT_EQ(touched, 3u);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].start, 0x12000u);
  EXPECT_EQ(parts[0].bytes, 0x2000u);
  EXPECT_EQ(parts[1].id, 2u);
  EXPECT_EQ(parts[2].start, 0x30000u);
  EXPECT_EQ(parts[2].bytes, 0x1000u);  // span ends at 0x31000, the whole range
  Region r;
  ASSERT_TRUE(reg.Lookup(0x11fff, &r));
  EXPECT_EQ(r.bytes, 0x2000u);
  EXPECT_FALSE(reg.Lookup(0x12000, &r));
  EXPECT_FALSE(reg.Lookup(0x20000, &r));
  EXPECT_FALSE(reg.Lookup(0x30000, &r));
}

TEST(RegistryTest, RemoveSpanInsideOneRangeSplitsIt) {
  Registry reg;
  reg.Insert(Make(0x100000, 0x10000, 9));
  reg.RemoveSpan(0x104000, 0x1000);
  Region r;
  ASSERT_TRUE(reg.Lookup(0x103fff, &r));
  EXPECT_EQ(r.start, 0x100000u);
  EXPECT_EQ(r.bytes, 0x4000u);
  EXPECT_FALSE(reg.Lookup(0x104000, &r));
  ASSERT_TRUE(reg.Lookup(0x105000, &r));
  EXPECT_EQ(r.start, 0x105000u);
  EXPECT_EQ(r.bytes, 0xb000u);
  EXPECT_EQ(r.id, 9u);
}

// Random operations checked against a plain std::map model, across many chunk
// splits and merges.
TEST(RegistryTest, MatchesModelUnderRandomOperations) {
  Registry reg;
  std::map<uintptr_t, Region> model;
  std::mt19937_64 rng(42);
  const uintptr_t kSlotBytes = 0x1000;
  for (int step = 0; step < 200000; ++step) {
    uintptr_t slot = 0x1000000 + (rng() % 5000) * kSlotBytes;
    int op = rng() % 3;
    if (op == 0) {
      if (model.count(slot) == 0) {
        Region r = Make(slot, kSlotBytes - (rng() % 64), step + 1);
        ASSERT_TRUE(reg.Insert(r));
        model[slot] = r;
      }
    } else if (op == 1) {
      Region out;
      bool removed = reg.Remove(slot, &out);
      ASSERT_EQ(removed, model.count(slot) == 1) << step;
      if (removed) {
        EXPECT_EQ(out.id, model[slot].id);
        model.erase(slot);
      }
    } else {
      uintptr_t probe = slot + rng() % kSlotBytes;
      Region r;
      bool found = reg.Lookup(probe, &r);
      auto it = model.find(slot);
      bool expect = it != model.end() && probe < it->second.start + it->second.bytes;
      ASSERT_EQ(found, expect) << step;
      if (found) {
        EXPECT_EQ(r.id, it->second.id);
      }
    }
    ASSERT_EQ(reg.size(), model.size());
  }
}

// AnyOverlapping agrees with a model on random spans, across chunk edges
// (thousands of ranges fill many chunks).
TEST(RegistryTest, AnyOverlappingMatchesModel) {
  Registry reg;
  std::map<uintptr_t, Region> model;
  std::mt19937_64 rng(7);
  const uintptr_t kSlotBytes = 0x1000;
  for (int i = 0; i < 3000; ++i) {
    uintptr_t slot = 0x1000000 + (rng() % 6000) * kSlotBytes;
    if (model.count(slot) != 0) continue;
    Region r = Make(slot, 1 + rng() % (kSlotBytes - 1), i + 1);
    ASSERT_TRUE(reg.Insert(r));
    model[slot] = r;
  }
  EXPECT_FALSE(reg.AnyOverlapping(0x1000000, 0));
  for (int probe = 0; probe < 100000; ++probe) {
    uintptr_t start = 0xff0000 + rng() % (6100 * kSlotBytes);
    uint64_t bytes = 1 + rng() % (3 * kSlotBytes);
    bool expect = false;
    auto it = model.upper_bound(start);
    if (it != model.end() && it->first < start + bytes) expect = true;
    if (it != model.begin()) {
      auto prev = std::prev(it);
      if (start < prev->first + prev->second.bytes) expect = true;
    }
    ASSERT_EQ(reg.AnyOverlapping(start, bytes), expect) << std::hex << start << " " << bytes;
  }
}

// Readers never see a range that was not inserted, and always see the ranges
// that stay put, while a writer churns the table.
TEST(RegistryTest, ConcurrentReadersSeeConsistentTable) {
  Registry reg;
  const uintptr_t kBase = 0x40000000;
  for (int i = 0; i < 1000; ++i) reg.Insert(Make(kBase + i * 0x20000, 0x10000, i + 1));
  std::atomic<bool> stop{false};
  std::atomic<long> errors{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      while (!stop.load()) {
        int i = rng() % 1000;
        Region r;
        // The even ranges are never touched by the writer.
        if (i % 2 == 0) {
          if (!reg.Lookup(kBase + i * 0x20000 + 5, &r) || r.id != uint64_t(i + 1)) errors++;
        }
        // The gaps never hold anything.
        if (reg.Lookup(kBase + i * 0x20000 + 0x18000, &r)) errors++;
      }
    });
  }
  std::mt19937_64 rng(99);
  for (int step = 0; step < 100000; ++step) {
    int i = (rng() % 500) * 2 + 1;
    uintptr_t start = kBase + i * 0x20000;
    if (!reg.Remove(start, nullptr)) reg.Insert(Make(start, 0x10000, i + 1));
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(errors.load(), 0);
}

}  // namespace
}  // namespace pinshim
