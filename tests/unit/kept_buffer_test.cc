// internal::KeptBuffer: what stays between ops, within the process's budget
// for kept scratch (ACCL_SCRATCH_KEEP_MB).
#include <gtest/gtest.h>

#include <vector>

#include "accl/config.h"
#include "accl/internal/kept_buffer.h"

using accl::internal::KeptBuffer;
using accl::internal::keptScratchBytes;

namespace {
constexpr size_t MiB = size_t(1) << 20;
}

TEST(KeptBuffer, KeepsWhatFitsTheProcessBudgetAndFreesTheRest) {
  const size_t budget = static_cast<size_t>(accl::Config::get().scratchKeepMb) * MiB;
  const size_t base = keptScratchBytes();
  ASSERT_EQ(base, 0u) << "another buffer of this process is kept";
  // Buffers of 48 MiB (pages never touched: only address space), one op each,
  // as many groups would hold them: those that fit the budget stay, the next is freed.
  const size_t each = 48 * MiB;
  const size_t fit = budget / each;
  std::vector<KeptBuffer> bufs(fit + 2);
  for (size_t i = 0; i < bufs.size(); ++i) {
    char* p = bufs[i].get(each);
    ASSERT_NE(p, nullptr);
    p[0] = p[each - 1] = 1;
    bufs[i].trim();
    if (i < fit) {
      EXPECT_EQ(bufs[i].capacity(), each) << "buffer " << i << " fits the budget of " << budget / MiB << " MiB";
      EXPECT_EQ(bufs[i].get(each), p) << "a kept buffer serves the next op";
    } else {
      EXPECT_EQ(bufs[i].capacity(), 0u) << "buffer " << i << " passes the budget";
    }
    EXPECT_EQ(keptScratchBytes(), std::min(i + 1, fit) * each);
    EXPECT_LE(keptScratchBytes(), budget);
  }
  // A buffer kept over several ops is counted once.
  if (fit > 0) {
    bufs[0].get(each / 2);
    bufs[0].trim();
    bufs[0].trim();
    EXPECT_EQ(keptScratchBytes(), fit * each);
    // Freeing one makes room for another group's buffer.
    bufs[0] = KeptBuffer();
    EXPECT_EQ(keptScratchBytes(), (fit - 1) * each);
    bufs[fit].get(each);
    bufs[fit].trim();
    EXPECT_EQ(bufs[fit].capacity(), each);
    EXPECT_EQ(keptScratchBytes(), fit * each);
    // Growing a kept buffer gives its old size back; the larger one is
    // counted at its op's end, if it fits then.
    bufs[1].get(each + MiB);
    EXPECT_EQ(keptScratchBytes(), (fit - 1) * each);
    bufs[1].trim();
    EXPECT_LE(keptScratchBytes(), budget);
    EXPECT_EQ(bufs[1].capacity() == 0, (fit - 1) * each + each + MiB > budget);
  }
  // A moved buffer carries its count; destroyed, every buffer gives it back.
  if (fit > 1) {
    KeptBuffer moved(std::move(bufs[2]));
    EXPECT_EQ(bufs[2].capacity(), 0u);
    EXPECT_EQ(moved.capacity(), each);
  }
  bufs.clear();
  EXPECT_EQ(keptScratchBytes(), 0u);
}

TEST(KeptBuffer, NeverKeepsMoreThanKeepMaxInOneBuffer) {
  KeptBuffer b;
  b.get(KeptBuffer::kKeepMax + 1);
  b.trim();
  EXPECT_EQ(b.capacity(), 0u);
  EXPECT_EQ(keptScratchBytes(), 0u);
  b.get(4096);
  b.trim();
  EXPECT_EQ(b.capacity(), accl::Config::get().scratchKeepMb > 0 ? 4096u : 0u);
}
