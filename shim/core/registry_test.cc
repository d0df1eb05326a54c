#include "shim/core/registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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

// The summary (how many ranges touch each 2 MiB granule) answers "none" only
// where no range is: a model with ranges spread over many granules, with
// inserts that replace, trims, splits, removals and clears, probed where the
// summary counts none and where it counts some.
TEST(RegistryTest, SummaryAgreesWithModelAcrossGranules) {
  constexpr uintptr_t kGranule = uintptr_t{2} << 20;
  const uintptr_t kBase = 0x7f0000000000;
  Registry reg;
  std::map<uintptr_t, Region> model;  // by start, non-overlapping
  std::mt19937_64 rng(2024);
  auto model_remove_span = [&](uintptr_t start, uintptr_t end) {
    std::vector<Region> keep;
    for (auto it = model.begin(); it != model.end();) {
      const Region& r = it->second;
      if (r.start < end && start < r.start + r.bytes) {
        if (r.start < start) keep.push_back(Make(r.start, start - r.start, r.id));
        if (r.start + r.bytes > end) keep.push_back(Make(end, r.start + r.bytes - end, r.id));
        it = model.erase(it);
      } else {
        ++it;
      }
    }
    for (const Region& k : keep) model[k.start] = k;
  };
  auto model_overlaps = [&](uintptr_t start, uintptr_t end) {
    for (const auto& [s0, r] : model) {
      if (r.start < end && start < r.start + r.bytes) return true;
    }
    return false;
  };
  auto random_addr = [&] {
    // 64 granules, a few of them crowded.
    return kBase + (rng() % 64) * kGranule + (rng() % 4 == 0 ? 0 : rng() % kGranule);
  };
  for (int step = 0; step < 20000; ++step) {
    const int op = rng() % 6;
    const uintptr_t a = random_addr();
    const uint64_t len = 1 + (rng() % 3 == 0 ? rng() % (3 * kGranule) : rng() % 0x20000);
    if (op <= 1) {
      ASSERT_TRUE(reg.Insert(Make(a, len, step + 1)));
      model_remove_span(a, a + len);
      model[a] = Make(a, len, step + 1);
    } else if (op == 2) {
      reg.RemoveSpan(a, len);
      model_remove_span(a, a + len);
    } else if (op == 3 && !model.empty()) {
      auto it = model.lower_bound(a);
      if (it == model.end()) it = model.begin();
      ASSERT_TRUE(reg.Remove(it->first, nullptr));
      model.erase(it);
    } else if (op == 4 && step % 997 == 0) {
      reg.Clear();
      model.clear();
    }
    for (int probe = 0; probe < 4; ++probe) {
      const uintptr_t p = random_addr();
      // Mostly within two granules; one probe in four spans up to ten (the
      // summary reads both ends, then the granules between, then searches).
      const uint64_t plen = 1 + (probe == 0 ? rng() % (10 * kGranule) : rng() % 0x40000);
      ASSERT_EQ(reg.AnyOverlapping(p, plen), model_overlaps(p, p + plen))
          << "step " << step << std::hex << " probe " << p << " + " << plen;
      // The hooks' quick probe may say yes where nothing is, never no where
      // something is; within two granules it says what the counts say.
      const bool quick = reg.MayHoldAny(p, p + plen - 1);
      if (model_overlaps(p, p + plen)) {
        ASSERT_TRUE(quick) << "step " << step << std::hex << " probe " << p << " + " << plen;
      }
      if (reg.size() != 0 && (p + plen - 1) / kGranule - p / kGranule > 1) ASSERT_TRUE(quick);
      Region r;
      ASSERT_EQ(reg.Lookup(p, &r), model_overlaps(p, p + 1)) << "step " << step;
    }
    ASSERT_EQ(reg.size(), model.size());
  }
}

// Ranges at the summary's reach (2^47) and probes at the top of the address
// space: where the summary cannot answer, the searches do.
TEST(RegistryTest, SummaryEdgesOfTheAddressSpace) {
  const uintptr_t kLimit = uintptr_t{1} << 47;
  Registry reg;
  ASSERT_TRUE(reg.Insert(Make(kLimit - 0x1000, 0x3000, 1)));  // across the limit
  ASSERT_TRUE(reg.Insert(Make(kLimit + (uintptr_t{8} << 20), 0x1000, 2)));
  Region r;
  EXPECT_TRUE(reg.Lookup(kLimit - 1, &r));
  EXPECT_TRUE(reg.Lookup(kLimit + 0x10, &r));
  EXPECT_EQ(r.id, 1u);
  EXPECT_TRUE(reg.AnyOverlapping(kLimit + 0x1000, 0x10));
  EXPECT_FALSE(reg.AnyOverlapping(kLimit + 0x2000, 0x1000));
  EXPECT_TRUE(reg.AnyOverlapping(kLimit - (uintptr_t{4} << 20), uintptr_t{4} << 20 | 1));
  EXPECT_FALSE(reg.AnyOverlapping(kLimit - (uintptr_t{4} << 20), uintptr_t{4} << 20 >> 1));
  EXPECT_TRUE(reg.Lookup(kLimit + (uintptr_t{8} << 20) + 5, &r));
  EXPECT_EQ(r.id, 2u);
  EXPECT_FALSE(reg.Lookup(UINTPTR_MAX, &r));
  EXPECT_FALSE(reg.AnyOverlapping(UINTPTR_MAX - 10, 100));  // runs past the top
  EXPECT_FALSE(reg.AnyOverlapping(UINTPTR_MAX, 1));
  EXPECT_TRUE(reg.AnyOverlapping(kLimit - 0x1000, UINT64_MAX));
  // A length that wraps the range's end back into its own granule.
  EXPECT_TRUE(reg.AnyOverlapping(0x1000, UINT64_MAX));
  EXPECT_TRUE(reg.AnyOverlapping(0x1000, UINT64_MAX - (uintptr_t{1} << 20)));
  ASSERT_TRUE(reg.Insert(Make(UINTPTR_MAX - 0xfff, 0x1000, 3)));  // the last page
  EXPECT_TRUE(reg.Lookup(UINTPTR_MAX, &r));
  EXPECT_EQ(r.id, 3u);
  EXPECT_TRUE(reg.AnyOverlapping(UINTPTR_MAX - 10, 100));
}

// The hooks' quick probe: no for an empty registry before any insert, yes
// for what it cannot read (past the summary's reach, wider than two
// granules, the summary off while ranges are held), and the counts of both
// ends' granules otherwise.
TEST(RegistryTest, QuickProbeSaysNoOnlyWhereTheCountsDo) {
  constexpr uintptr_t kGranule = uintptr_t{2} << 20;
  const uintptr_t kBase = 0x7d0000000000;
  Registry reg;
  EXPECT_FALSE(reg.MayHoldAny(kBase, kBase + 0xfff));  // nothing held, no summary
  ASSERT_TRUE(reg.Insert(Make(kBase + 0x1000, 0x1000, 1)));
  EXPECT_TRUE(reg.MayHoldAny(kBase + 0x1000, kBase + 0x1000));
  EXPECT_TRUE(reg.MayHoldAny(kBase + kGranule - 0x1000, kBase + kGranule));  // first end's granule
  EXPECT_TRUE(reg.MayHoldAny(kBase - 0x1000, kBase + 0x10));                 // last end's granule
  EXPECT_FALSE(reg.MayHoldAny(kBase + kGranule, kBase + 2 * kGranule - 1));
  EXPECT_FALSE(reg.MayHoldAny(kBase - kGranule, kBase - 1));
  EXPECT_FALSE(reg.MayHoldAny(kBase + kGranule, kBase + 3 * kGranule - 1));  // two granules
  EXPECT_TRUE(reg.MayHoldAny(kBase + kGranule, kBase + 3 * kGranule));       // three: not read
  const uintptr_t kLimit = uintptr_t{1} << 47;
  EXPECT_TRUE(reg.MayHoldAny(kLimit, kLimit + 0xfff));  // past the summary's reach
  ASSERT_TRUE(reg.Remove(kBase + 0x1000, nullptr));
  EXPECT_FALSE(reg.MayHoldAny(kBase + 0x1000, kBase + 0x1fff));
  // A range over 2 TiB turns the summary off: yes while anything is held.
  ASSERT_TRUE(reg.Insert(Make(0x100000000000, (uint64_t{1} << 41) + 4096, 2)));
  EXPECT_TRUE(reg.MayHoldAny(kBase + 0x1000, kBase + 0x1fff));
  ASSERT_TRUE(reg.Remove(0x100000000000, nullptr));
  EXPECT_FALSE(reg.MayHoldAny(kBase + 0x1000, kBase + 0x1fff));
}

// A granule holding more ranges than its count can hold stays counted (the
// summary never answers "none" for it again), and answers stay right.
TEST(RegistryTest, SummaryCountsSaturateSafely) {
  const uintptr_t kBase = 0x7e0000000000;
  Registry reg;
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(reg.Insert(Make(kBase + i * 0x1000, 0x800, i + 1)));
  for (int i = 0; i < 300; ++i) {
    EXPECT_TRUE(reg.AnyOverlapping(kBase + i * 0x1000, 1));
    EXPECT_FALSE(reg.AnyOverlapping(kBase + i * 0x1000 + 0x800, 0x800));
  }
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(reg.Remove(kBase + i * 0x1000, nullptr));
  EXPECT_FALSE(reg.AnyOverlapping(kBase, 0x200000));
  Region r;
  EXPECT_FALSE(reg.Lookup(kBase + 0x10, &r));
  ASSERT_TRUE(reg.Insert(Make(kBase + 0x5000, 0x1000, 7)));
  EXPECT_TRUE(reg.Lookup(kBase + 0x5010, &r));
  EXPECT_EQ(r.id, 7u);
}

// A range too large to count (over 2 TiB) turns the summary off; the
// answers stay right, from the searches alone.
TEST(RegistryTest, AHugeRangeTurnsTheSummaryOff) {
  const uintptr_t kBase = 0x100000000000;
  Registry reg;
  ASSERT_TRUE(reg.Insert(Make(kBase, 0x10000, 1)));
  ASSERT_TRUE(reg.Insert(Make(kBase + (uint64_t{1} << 42), (uint64_t{1} << 41) + 4096, 2)));
  Region r;
  EXPECT_TRUE(reg.Lookup(kBase + 5, &r));
  EXPECT_EQ(r.id, 1u);
  EXPECT_TRUE(reg.Lookup(kBase + (uint64_t{1} << 42) + (uint64_t{1} << 40), &r));
  EXPECT_EQ(r.id, 2u);
  EXPECT_FALSE(reg.AnyOverlapping(kBase + 0x10000, 0x1000));
  ASSERT_TRUE(reg.Remove(kBase + (uint64_t{1} << 42), nullptr));
  EXPECT_FALSE(reg.Lookup(kBase + (uint64_t{1} << 42) + 5, &r));
  EXPECT_TRUE(reg.AnyOverlapping(kBase, 1));
}

// Trimming one end of a range never makes a lookup of the part that stays
// miss, not even while the trim is under way (the summary counts the part
// that stays before it stops counting the whole).
TEST(RegistryTest, TrimsNeverHideThePartThatStays) {
  constexpr uintptr_t kGranule = uintptr_t{2} << 20;
  const uintptr_t kBase = 0x7d0000000000;
  Registry reg;
  // The part that stays is a whole granule of its own; the part trimmed
  // off and put back is in the next ones.
  ASSERT_TRUE(reg.Insert(Make(kBase, 4 * kGranule, 1)));
  std::atomic<bool> stop{false};
  std::atomic<long> misses{0}, probes{0};
  std::thread reader([&] {
    Region r;
    while (!stop.load(std::memory_order_relaxed)) {
      if (!reg.Lookup(kBase + 0x1000, &r)) misses++;
      if (!reg.AnyOverlapping(kBase + 0x2000, 0x1000)) misses++;
      probes++;
    }
  });
  // The writer runs while the reader probes: from its first probes until it
  // made many more (or two seconds passed).
  while (probes.load() < 100) std::this_thread::yield();
  const long from = probes.load();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (probes.load() < from + 200000 && std::chrono::steady_clock::now() < deadline) {
    reg.RemoveSpan(kBase + kGranule, 3 * kGranule);         // trims the range to its first granule
    ASSERT_TRUE(reg.Insert(Make(kBase, 4 * kGranule, 2)));  // and the whole again, over it
  }
  stop = true;
  reader.join();
  EXPECT_EQ(misses.load(), 0);
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
