#include "shim/optimize/page_change.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace pinshim {
namespace optimize {
namespace {

using Slots = PageChangeSlots;

// Whether another thread (not this one) sees a change marked over [lo, hi).
bool SeenFromAnotherThread(uintptr_t lo, uintptr_t hi) {
  bool seen = false;
  std::thread([&] { seen = Slots::AnyOverlapping(lo, hi); }).join();
  return seen;
}

// A change of [lo, hi) in progress on another thread, from construction
// (once it is marked) until destruction.
class ChangeOnAnotherThread {
 public:
  ChangeOnAnotherThread(uintptr_t lo, uintptr_t hi)
      : thread_([this, lo, hi] {
          const Slots::Mark m = Slots::Begin(lo, hi);
          std::unique_lock<std::mutex> lock(mu_);
          marked_ = true;
          cv_.notify_all();
          cv_.wait(lock, [this] { return done_; });
          lock.unlock();
          Slots::End(m);
        }) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return marked_; });
  }
  ~ChangeOnAnotherThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool marked_ = false, done_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

class PageChangeSlotsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { Slots::Setup(); }
};

TEST_F(PageChangeSlotsTest, AMarkIsSeenByRegistrationsItOverlapsUntilItEnds) {
  EXPECT_FALSE(SeenFromAnotherThread(0x1000, 0x9000));
  const Slots::Mark m = Slots::Begin(0x4000, 0x6000);
  EXPECT_EQ(m, Slots::kSlot);
  EXPECT_TRUE(SeenFromAnotherThread(0x5000, 0x5001));
  EXPECT_TRUE(SeenFromAnotherThread(0x1000, 0x4001));
  EXPECT_TRUE(SeenFromAnotherThread(0x5fff, 0x9000));
  EXPECT_FALSE(SeenFromAnotherThread(0x1000, 0x4000));  // half-open ranges
  EXPECT_FALSE(SeenFromAnotherThread(0x6000, 0x9000));
  // The thread's own change is left out where asked (a hook pinning again
  // after the change it made), and seen otherwise.
  EXPECT_FALSE(Slots::AnyOverlapping(0x5000, 0x5001, /*ignore_own=*/true));
  EXPECT_TRUE(Slots::AnyOverlapping(0x5000, 0x5001));
  Slots::End(m);
  EXPECT_FALSE(SeenFromAnotherThread(0x1000, 0x9000));
}

TEST_F(PageChangeSlotsTest, ANestedChangeWidensTheOuterMarkWhichItsEndClears) {
  // mremap: the source's change, and inside it the target's, far apart.
  const Slots::Mark outer = Slots::Begin(0x10000, 0x20000);
  const Slots::Mark inner = Slots::Begin(0x90000, 0xa0000);
  EXPECT_EQ(outer, Slots::kSlot);
  EXPECT_EQ(inner, Slots::kNested);
  EXPECT_TRUE(SeenFromAnotherThread(0x10000, 0x10001));
  EXPECT_TRUE(SeenFromAnotherThread(0x9ffff, 0xa0000));
  Slots::End(inner);
  // The outer call is still in progress: its range stays marked.
  EXPECT_TRUE(SeenFromAnotherThread(0x10000, 0x10001));
  Slots::End(outer);
  EXPECT_FALSE(SeenFromAnotherThread(0x0, UINTPTR_MAX));
  // A nested change that starts below the outer one widens it downwards.
  const Slots::Mark o2 = Slots::Begin(0x50000, 0x60000);
  const Slots::Mark i2 = Slots::Begin(0x1000, 0x2000);
  EXPECT_TRUE(SeenFromAnotherThread(0x1000, 0x1001));
  EXPECT_TRUE(SeenFromAnotherThread(0x5ffff, 0x60000));
  Slots::End(i2);
  Slots::End(o2);
  EXPECT_FALSE(SeenFromAnotherThread(0x0, UINTPTR_MAX));
}

TEST_F(PageChangeSlotsTest, ThreadsMarkTheirOwnSlots) {
  {
    ChangeOnAnotherThread other(0x70000, 0x80000);
    const Slots::Mark mine = Slots::Begin(0x1000, 0x2000);
    EXPECT_EQ(mine, Slots::kSlot);  // not nested in the other thread's change
    Slots::End(mine);
    // The other thread's change is still in progress, even to this thread
    // leaving its own out.
    EXPECT_TRUE(Slots::AnyOverlapping(0x70000, 0x70001, /*ignore_own=*/true));
  }
  EXPECT_FALSE(Slots::AnyOverlapping(0x0, UINTPTR_MAX));
}

// More threads changing pages at once than there are slots: the ones left
// without a slot count globally, and every registration meanwhile stands
// back, whatever its range. Slots of threads that exited are taken over.
TEST_F(PageChangeSlotsTest, ThreadsBeyondTheSlotsOverlapEveryRange) {
  constexpr int kThreads = 600;  // more than the 512 slots
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  bool release = false;
  std::vector<Slots::Mark> marks(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      const uintptr_t lo = 0x100000000ull + static_cast<uintptr_t>(i) * 0x10000;
      marks[i] = Slots::Begin(lo, lo + 0x1000);
      std::unique_lock<std::mutex> lock(mu);
      ++started;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
      lock.unlock();
      Slots::End(marks[i]);
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return started == kThreads; });
  }
  int unslotted = 0;
  for (Slots::Mark m : marks) unslotted += m == Slots::kUnslotted;
  EXPECT_GE(unslotted, kThreads - 512);
  // A range no thread marked still overlaps: some changes have no slot.
  EXPECT_TRUE(Slots::AnyOverlapping(0x1000, 0x2000));
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
    cv.notify_all();
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(Slots::AnyOverlapping(0x0, UINTPTR_MAX));
  // Their slots are free again for new threads.
  Slots::Mark again = Slots::kUnslotted;
  std::thread([&] {
    again = Slots::Begin(0x1000, 0x2000);
    Slots::End(again);
  }).join();
  EXPECT_EQ(again, Slots::kSlot);
}

TEST_F(PageChangeSlotsTest, AForkChildForgetsTheParentsChanges) {
  ChangeOnAnotherThread other(0x70000, 0x80000);
  ASSERT_TRUE(Slots::AnyOverlapping(0x70000, 0x70001));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Slots::AfterForkChild();
    // The thread that marked does not exist here.
    int bad = Slots::AnyOverlapping(0x0, UINTPTR_MAX) ? 1 : 0;
    const Slots::Mark m = Slots::Begin(0x1000, 0x2000);
    bad |= m != Slots::kSlot ? 2 : 0;
    bad |= !Slots::AnyOverlapping(0x1000, 0x1001) ? 4 : 0;
    Slots::End(m);
    bad |= Slots::AnyOverlapping(0x0, UINTPTR_MAX) ? 8 : 0;
    _exit(bad);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(AdviceEffects, FollowTheTable) {
  for (int hint :
       {MADV_NORMAL, MADV_RANDOM, MADV_SEQUENTIAL, MADV_WILLNEED, MADV_COLD, MADV_DONTDUMP,
        MADV_DODUMP, MADV_POPULATE_READ, MADV_POPULATE_WRITE, MADV_DONTFORK, MADV_DOFORK,
        MADV_KEEPONFORK, MADV_UNMERGEABLE, MADV_NOHUGEPAGE}) {
    EXPECT_EQ(AdviceEffects(hint), 0) << "advice " << hint;
  }
  for (int priv : {MADV_DONTNEED, MADV_FREE, MADV_PAGEOUT, MADV_WIPEONFORK, MADV_MERGEABLE,
                   MADV_HUGEPAGE, MADV_COLLAPSE}) {
    const PageChange c(OwnPinReason::kPageChangeMadvise, static_cast<uint32_t>(priv),
                       AdviceEffects(priv));
    EXPECT_TRUE(c.replaces_private()) << "advice " << priv;
    EXPECT_FALSE(c.replaces_shared()) << "advice " << priv;
    EXPECT_TRUE(c.stays_anonymous()) << "advice " << priv;
  }
  // Punching holes reaches the pool's shared memory; unknown values count
  // as replacing everything.
  for (int all : {MADV_REMOVE, MADV_HWPOISON, 12345}) {
    const PageChange c(OwnPinReason::kPageChangeMadvise, static_cast<uint32_t>(all),
                       AdviceEffects(all));
    EXPECT_TRUE(c.replaces_private()) << "advice " << all;
    EXPECT_TRUE(c.replaces_shared()) << "advice " << all;
    EXPECT_EQ(c.detail(), static_cast<uint32_t>(all));
    EXPECT_EQ(c.reason(), OwnPinReason::kPageChangeMadvise);
  }
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
