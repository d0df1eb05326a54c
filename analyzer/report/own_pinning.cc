#include "analyzer/report/own_pinning.h"

#include <algorithm>

#include "analyzer/report/format.h"

namespace pinshim {
namespace report {
namespace {

constexpr int kCache = static_cast<int>(OwnPinPart::kCache);
constexpr int kArena = static_cast<int>(OwnPinPart::kArena);
constexpr int kPoolSlab = static_cast<int>(OwnPinPart::kPoolSlab);
constexpr int kPoolDedicated = static_cast<int>(OwnPinPart::kPoolDedicated);

// The report groups the pool's two parts.
const char* GroupOf(OwnPinPart part) {
  switch (part) {
    case OwnPinPart::kPoolSlab:
    case OwnPinPart::kPoolDedicated: return "pool";
    case OwnPinPart::kCache: return "cache";
    case OwnPinPart::kArena: return "arena";
    case OwnPinPart::kStaging: return "staging";
    default: return "other";
  }
}

std::string RefusalWords(const std::string& reason, bool cap_known, uint64_t cap) {
  if (reason == "cap") {
    return "pinshim's pin cap" + (cap_known ? " (" + FormatBytes(cap) + ")" : std::string()) +
           " was full even after evicting idle pinning; raise --pin-cap (PINSHIM_PIN_CAP) to pin "
           "it";
  }
  if (reason == "budget") return "enforce mode's pinned-memory budget refused it";
  if (reason == "memlock_limit") {
    return "RLIMIT_MEMLOCK would have been exceeded; raise it (ulimit -l) to pin it";
  }
  if (reason == "out_of_memory") return "the driver ran out of memory pinning it";
  if (reason == "already_registered") {
    return "the program had registered (part of) it itself";
  }
  if (reason == "driver_error") return "the driver refused to register it";
  if (reason == "no_context") return "no CUDA context was current on the copying thread";
  if (reason == "table_full") return "the registration cache's table was full";
  return "pinning it was refused (" + reason + ")";
}

}  // namespace

std::string OwnDropWords(const std::string& reason) {
  if (reason == "program_released") return "released by the program";
  if (reason == "evicted_cap") return "evicted for the pin cap";
  if (reason == "evicted_budget") return "evicted for the budget";
  if (reason == "idle_trim") return "given back when idle";
  if (reason == "context_destroyed") return "freed with its context";
  if (reason == "evicted_table_full") return "evicted for the cache's table";
  if (reason == "program_registered") return "registered by the program itself";
  if (reason == "page_change_madvise") return "its pages changed (madvise)";
  if (reason == "page_change_map_fixed") return "mapped over (mmap MAP_FIXED)";
  if (reason == "page_change_mremap") return "moved (mremap)";
  if (reason == "page_change_munmap") return "partly unmapped (munmap)";
  if (reason == "page_change_shm") return "a shared memory segment attached over it";
  if (reason == "page_change_brk") return "the heap shrank over it (brk)";
  if (reason == "pages_verified_changed") return "other pages found there (PINSHIM_VERIFY_PAGES)";
  if (reason == "copy_past_end") return "a copy ran past its end";
  if (reason == "copy_into_capture") return "a copy of it went into a stream capture";
  return reason;
}

double OwnPinningSummary::PoolHitRate() const {
  const uint64_t n = counters.pool_hits + counters.pool_misses;
  return n == 0 ? -1 : static_cast<double>(counters.pool_hits) / static_cast<double>(n);
}

double OwnPinningSummary::CacheHitRate() const {
  const uint64_t n = cache_copies_pinned + cache_copies_pageable;
  return n == 0 ? -1 : static_cast<double>(cache_copies_pinned) / static_cast<double>(n);
}

void OwnPinningTracker::Begin(const ProcessInfo& process) {
  s_.optimize_mode = process.mode.find("optimize") != std::string::npos;
  page_size_ = process.page_size != 0 ? process.page_size : 4096;
}

const OwnPinningTracker::Range* OwnPinningTracker::RangeAt(uint64_t addr) const {
  auto it = ranges_.upper_bound(addr);
  if (it == ranges_.begin()) return nullptr;
  --it;
  return addr < it->second.end ? &it->second : nullptr;
}

void OwnPinningTracker::OnCopy(const Event& e, const PinnedAlloc* pinned) {
  if (!s_.optimize_mode || !e.IsHostDeviceCopy()) return;
  if (e.staged_workers != 0) {
    ++s_.staged_copies;
    s_.staged_bytes += e.bytes;
    s_.staged_ns += e.duration_ns;
    if (e.staged_workers > s_.staged_workers_max) s_.staged_workers_max = e.staged_workers;
  }
  const MemKind kind = e.HostKind();
  if (kind != MemKind::kPageable && kind != MemKind::kPinnedByPinshim) return;
  const Range* range = kind == MemKind::kPinnedByPinshim ? RangeAt(e.host_ptr) : nullptr;
  if (e.alloc_id != 0) {
    if (kind == MemKind::kPageable) {
      ++s_.cache_copies_pageable;
    } else if (range != nullptr && range->part == OwnPinPart::kCache) {
      ++s_.cache_copies_pinned;
    }
  }
  // Buffers: the allocation, else the address itself (as pageable-hot does).
  const uint64_t key = e.alloc_id != 0 ? e.alloc_id : (e.host_ptr | (1ull << 63));
  Buffer& b = buffers_[key];
  const auto alloc = e.alloc_id != 0 ? allocs_.find(e.alloc_id) : allocs_.end();
  if (b.out.copies == 0) {
    b.out.alloc_id = e.alloc_id;
    b.out.address = e.host_ptr;
    if (alloc != allocs_.end()) {
      b.out.address = alloc->second.ptr;
      b.out.size = alloc->second.bytes;
      b.out.alloc_stack = alloc->second.stack;
    } else if (pinned != nullptr) {  // the program's own pinned allocation (pool)
      b.out.address = pinned->ptr;
      b.out.size = pinned->bytes;
      b.out.alloc_stack = pinned->stack;
    }
  }
  ++b.out.copies;
  b.out.bytes_copied += e.bytes;
  b.loss += model_->PageableLoss(e.dir, e.bytes);
  b.bytes_by_stack[e.stack] += e.bytes;
  if (kind == MemKind::kPinnedByPinshim) {
    ++b.out.copies_pinned;
    if (range != nullptr && static_cast<int>(range->part) < static_cast<int>(OwnPinPart::kCount)) {
      ++b.by_part[static_cast<int>(range->part)];
    }
  } else if (alloc != allocs_.end() && alloc->second.source == 1) {
    // The registration cache's rule for mmap regions: one buffer is copied
    // from its first page and at least half of it at a time.
    const Alloc& a = alloc->second;
    if (e.host_ptr < a.ptr || e.host_ptr - a.ptr >= page_size_ || e.bytes * 2 < a.bytes) {
      b.sub_allocation = true;
    }
  }
}

void OwnPinningTracker::OnHostAlloc(const Event& e) {
  if (!s_.optimize_mode || e.is_free) return;
  // Kept after the free: hot buffers are described at the end.
  Alloc& a = allocs_[e.alloc_id];
  a.ptr = e.ptr;
  a.bytes = e.bytes;
  a.source = e.source;
  a.stack = e.stack;
}

int OwnPinningTracker::Durations::Bucket(uint64_t ns) {
  if (ns < 2 * kSub) return static_cast<int>(ns);
  const int msb = 63 - __builtin_clzll(ns);  // >= 7
  const int sub = static_cast<int>((ns >> (msb - 6)) & (kSub - 1));
  return 2 * kSub + (msb - 7) * kSub + sub;
}

uint64_t OwnPinningTracker::Durations::Low(int bucket) {
  if (bucket < 2 * kSub) return static_cast<uint64_t>(bucket);
  const int msb = (bucket - 2 * kSub) / kSub + 7;
  const uint64_t sub = static_cast<uint64_t>((bucket - 2 * kSub) % kSub);
  return (uint64_t{1} << msb) | (sub << (msb - 6));
}

void OwnPinningTracker::Durations::Add(uint64_t ns) {
  ++buckets_[Bucket(ns)];
  ++count_;
  sum_ += ns;
}

uint64_t OwnPinningTracker::Durations::Median() const {
  if (count_ == 0) return 0;
  const uint64_t half = (count_ + 1) / 2;
  uint64_t seen = 0;
  const int n = static_cast<int>(sizeof(buckets_) / sizeof(buckets_[0]));
  for (int b = 0; b < n; ++b) {
    seen += buckets_[b];
    if (seen < half) continue;
    if (b < 2 * kSub) return Low(b);
    // The bucket's middle: within half a bucket (1/128) of every value in it.
    return b + 1 < n ? (Low(b) + Low(b + 1)) / 2 : Low(b);
  }
  return 0;
}

void OwnPinningTracker::OnUnpin(const Event& e, const PinnedAlloc* pinned) {
  if (e.op != PinOp::kFree || pinned == nullptr || pinned->registered) return;
  const uint64_t pair = pinned->call_ns + e.duration_ns;
  pair_alloc_ns_.Add(pinned->call_ns);
  pair_free_ns_.Add(e.duration_ns);
  pair_ns_.Add(pair);
  if (grown_.erase(pinned->ptr) != 0) {
    ++s_.growth_pairs;
    s_.growth_pair_ns += pair;
  } else {
    held_pair_ns_.Add(pair);
  }
}

void OwnPinningTracker::OnPinnedAlloc(const Event& e) {
  ThreadPins& t = thread_pins_[e.tid];
  const uint64_t end = e.time_ns + e.duration_ns;
  grown_.erase(e.ptr);  // an earlier allocation at this address, freed unseen
  if (t.slab_ns != 0 && t.slab_ns >= e.time_ns && t.slab_ns <= end) {
    grown_.insert(e.ptr);
    t.slab_ns = 0;
  }
  t.alloc_ptr = e.ptr;
  t.alloc_start_ns = e.time_ns;
  t.alloc_end_ns = end;
}

void OwnPinningTracker::OnOwnPin(const Event& e) {
  switch (e.own_action) {
    case OwnPinAction::kPinned: {
      if (e.own_part == OwnPinPart::kPoolSlab || e.own_part == OwnPinPart::kPoolDedicated) {
        ThreadPins& t = thread_pins_[e.tid];
        if (t.alloc_end_ns != 0 && e.time_ns >= t.alloc_start_ns && e.time_ns <= t.alloc_end_ns) {
          grown_.insert(t.alloc_ptr);  // the allocation's record came first
        } else {
          t.slab_ns = e.time_ns;
        }
      }
      ranges_[e.ptr] = Range{e.ptr + (e.bytes == 0 ? 1 : e.bytes), e.own_part, e.alloc_id};
      pinned_now_ += e.bytes;
      s_.peak_bytes = std::max(s_.peak_bytes, pinned_now_);
      if (e.own_part == OwnPinPart::kCache && e.alloc_id != 0) ids_[e.alloc_id].cached = true;
      break;
    }
    case OwnPinAction::kUnpinned: {
      auto it = ranges_.find(e.ptr);
      if (it != ranges_.end()) ranges_.erase(it);
      pinned_now_ -= std::min(pinned_now_, e.bytes);
      s_.dropped_bytes[OwnPinReasonName(e.own_reason)] += e.bytes;
      if (e.own_part == OwnPinPart::kCache && e.alloc_id != 0) {
        ids_[e.alloc_id].last_unpin = e.own_reason;
      }
      if (IsPageChange(e.own_reason)) NotePageChange(e, "unpinned");
      break;
    }
    case OwnPinAction::kRetired:
      // Still pinned until its last block is freed; counted as a drop now.
      if (IsPageChange(e.own_reason)) NotePageChange(e, "retired");
      break;
    case OwnPinAction::kRefused: {
      ++s_.refusals[GroupOf(e.own_part)][OwnPinReasonName(e.own_reason)];
      if (e.alloc_id != 0) {
        IdState& st = ids_[e.alloc_id];
        ++st.refusals;
        st.last_refusal = e.own_reason;
      }
      break;
    }
    default: break;  // a newer writer's action
  }
}

void OwnPinningTracker::NotePageChange(const Event& e, const char* action) {
  const std::string call = OwnPinReasonName(e.own_reason);
  PageChangeDrop& d = page_changes_[std::make_tuple(call, GroupOf(e.own_part), e.stack)];
  if (d.times == 0) {
    d.call = call;
    d.part = GroupOf(e.own_part);
    d.action = action;
    d.detail = e.own_detail;
    d.stack = e.stack;
  }
  ++d.times;
  d.bytes += e.bytes;
}

void OwnPinningTracker::OnCounters(const Event& e) {
  // The latest snapshot wins, whatever order the threads' batches were
  // written in: the sampler's last one can reach the file after the record
  // the process took at its end.
  if (s_.has_counters && e.time_ns < counters_time_ns_) return;
  s_.has_counters = true;
  s_.counters = e.counters;
  counters_time_ns_ = e.time_ns;
}

void OwnPinningTracker::OnPathVerdict(const Event& e) {
  const trace::PathVerdictFields& f = e.verdict;
  static const char* const kFrom[] = {"0",      "256 KiB", "1 MiB",   "4 MiB",
                                      "16 MiB", "64 MiB",  "256 MiB", "1 GiB"};
  const auto key = std::make_tuple(f.dir, f.sync, f.size_class, f.path);
  auto it = verdicts_.find(key);
  if (it != verdicts_.end() && it->second.first > e.time_ns) return;
  PathVerdictRow r;
  r.dir = f.dir == static_cast<uint64_t>(CopyDir::kDeviceToHost) ? "D2H" : "H2D";
  r.sync = f.sync != 0;
  r.size_class = static_cast<uint32_t>(f.size_class);
  r.size_from = f.size_class < 8 ? kFrom[f.size_class] : "?";
  r.path = f.path == 1 ? "staged" : f.path == 2 ? "pinned in place" : "unknown";
  r.slower = f.verdict == 2;
  r.path_copies = f.path_copies;
  r.driver_copies = f.driver_copies;
  r.losses = f.losses;
  r.path_gbps = f.path_ns_per_mib != 0 ? 1048576.0 / static_cast<double>(f.path_ns_per_mib) : 0;
  r.driver_gbps =
      f.driver_ns_per_mib != 0 ? 1048576.0 / static_cast<double>(f.driver_ns_per_mib) : 0;
  verdicts_[key] = std::make_pair(e.time_ns, r);
}

void OwnPinningTracker::Classify(Buffer* b) const {
  OwnPinningBuffer& o = b->out;
  const IdState* st = nullptr;
  if (o.alloc_id != 0) {
    auto it = ids_.find(o.alloc_id);
    if (it != ids_.end()) st = &it->second;
  }
  if (st != nullptr) o.refusals = st->refusals;
  const std::string ran =
      FormatCount(o.copies_pinned) + " of " + FormatCount(o.copies) + " copies ran pinned";
  if (b->by_part[kCache] > 0 || (st != nullptr && st->cached)) {
    o.pinned = true;
    o.by = "cache";
    o.detail = "pinned in place by the registration cache; " + ran;
    if (st != nullptr && st->last_unpin != OwnPinReason::kNone) {
      o.unpinned = OwnPinReasonName(st->last_unpin);
      o.detail += "; last unpinned: " + OwnDropWords(o.unpinned);
    }
    return;
  }
  if (b->by_part[kArena] > 0) {
    o.pinned = true;
    o.by = "arena";
    o.detail = "allocated from pinshim's pinned arena; " + ran;
    return;
  }
  if (b->by_part[kPoolSlab] + b->by_part[kPoolDedicated] > 0) {
    o.pinned = true;
    o.by = "pool";
    o.detail = "the program's own pinned allocation, served from pinshim's pool";
    return;
  }
  if (o.copies_pinned > 0) {
    o.pinned = true;
    o.by = "pinshim";
    o.detail = "on memory pinshim pinned; " + ran;
    return;
  }
  o.pinned = false;
  if (st != nullptr && st->refusals > 0) {
    o.by = "refused";
    o.reason = OwnPinReasonName(st->last_refusal);
    o.detail = RefusalWords(o.reason, s_.cap_known, s_.cap_bytes) + "; it stayed pageable";
  } else if (o.alloc_id == 0) {
    o.by = "untracked";
    o.detail =
        "not a tracked allocation (below PINSHIM_TRACK_THRESHOLD, stack or static data, or "
        "sub-allocated by a custom allocator such as Python's or a framework's caching "
        "allocator): pinshim cannot see it freed, so it never pins it";
  } else if (b->sub_allocation) {
    o.by = "mmap_region";
    o.detail =
        "lies inside an mmap region that is not used as one buffer (a custom allocator's "
        "arena): pinshim cannot see its pieces freed, so it leaves the region alone";
  } else if (s_.cap_known && o.size > s_.cap_bytes) {
    o.by = "larger_than_cap";
    o.detail = "larger than pinshim's pin cap (" + FormatBytes(s_.cap_bytes) +
               "); raise --pin-cap (PINSHIM_PIN_CAP) to pin it";
  } else {
    o.by = "cost_model";
    o.detail =
        "its copies were too few, too small or too far apart for pinning to pay off under "
        "the cost model";
  }
}

OwnPinningSummary OwnPinningTracker::Finish() {
  s_.verdicts.clear();
  for (const auto& kv : verdicts_) s_.verdicts.push_back(kv.second.second);
  s_.pinned_pairs = pair_ns_.count();
  s_.pair_ns = {pair_ns_.Mean(), pair_ns_.Median()};
  s_.pair_alloc_ns = {pair_alloc_ns_.Mean(), pair_alloc_ns_.Median()};
  s_.pair_free_ns = {pair_free_ns_.Mean(), pair_free_ns_.Median()};
  s_.held_pairs = held_pair_ns_.count();
  s_.held_pair_ns = {held_pair_ns_.Mean(), held_pair_ns_.Median()};
  if (s_.has_counters) {
    s_.peak_bytes = std::max(s_.peak_bytes, s_.counters.pinned_bytes_peak);
    s_.final_bytes = s_.counters.pinned_bytes_now;
    s_.cap_known = true;
    s_.cap_bytes = s_.counters.pin_cap_bytes;
  } else {
    s_.final_bytes = pinned_now_;
  }
  s_.cache_buffers_registered = 0;
  for (const auto& kv : ids_) {
    if (kv.second.cached) ++s_.cache_buffers_registered;
  }
  s_.page_changes.clear();
  for (const auto& kv : page_changes_) s_.page_changes.push_back(kv.second);
  std::stable_sort(
      s_.page_changes.begin(), s_.page_changes.end(),
      [](const PageChangeDrop& a, const PageChangeDrop& b) { return a.times > b.times; });
  std::vector<Buffer*> hot;
  for (auto& kv : buffers_) {
    Buffer& b = kv.second;
    if (b.out.copies < options_->pageable_hot_min_copies ||
        b.loss < options_->pageable_hot_min_seconds) {
      continue;
    }
    uint64_t best = 0;
    for (const auto& st : b.bytes_by_stack) {
      if (st.second > best || (st.second == best && st.first < b.out.copy_stack)) {
        best = st.second;
        b.out.copy_stack = st.first;
      }
    }
    Classify(&b);
    hot.push_back(&b);
  }
  std::sort(hot.begin(), hot.end(), [](const Buffer* a, const Buffer* b) {
    if (a->out.bytes_copied != b->out.bytes_copied)
      return a->out.bytes_copied > b->out.bytes_copied;
    if (a->out.alloc_id != b->out.alloc_id) return a->out.alloc_id < b->out.alloc_id;
    return a->out.address < b->out.address;
  });
  s_.hot_buffers = hot.size();
  for (size_t i = 0; i < hot.size() && i < kMaxBuffers; ++i) s_.buffers.push_back(hot[i]->out);
  return s_;
}

}  // namespace report
}  // namespace pinshim
