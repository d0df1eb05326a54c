// The engine's options start where the configuration's defaults do
// (shim/core/config_keys.inc): a test or a benchmark that builds the engine
// without a Config runs it as the library would with nothing set.
#include <gtest/gtest.h>

#include "shim/core/config.h"
#include "shim/optimize/host_arena.h"
#include "shim/optimize/pinned_pool.h"
#include "shim/optimize/stager.h"

namespace pinshim {
namespace optimize {
namespace {

TEST(OptionDefaultsTest, AreTheConfigurationDefaults) {
  Config config;
  SetConfigDefaults(uint64_t{64} << 30, &config);
  const uint64_t idle_trim_ns = uint64_t{config.idle_trim_s} * 1000000000u;

  const StagerOptions stager;
  EXPECT_EQ(stager.workers, config.stage_workers);
  EXPECT_EQ(stager.chunk_bytes, config.stage_chunk_bytes);
  EXPECT_EQ(stager.slots, config.stage_slots);
  EXPECT_EQ(stager.ordered_reads, config.stage_ordered);
  EXPECT_EQ(stager.load_aware, config.stage_workers == 0);
  EXPECT_EQ(stager.idle_trim_ns, idle_trim_ns);
  EXPECT_EQ(PoolOptions().idle_trim_ns, idle_trim_ns);
  EXPECT_EQ(ArenaOptions().idle_trim_ns, idle_trim_ns);
}

}  // namespace
}  // namespace optimize
}  // namespace pinshim
