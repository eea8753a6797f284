// core/memory_usage.h against what the test itself does: RSS grows by what it writes, and the
// resident part of a file mapping is what was read of it.
#include "core/memory_usage.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/mapped_file.h"

namespace kvmem {
namespace {

TEST(MemoryUsage, RssFollowsWritesAndMappedReads) {
  const ProcessMemory before = ReadProcessMemory();
  ASSERT_GT(before.rss, 0u);
  std::vector<char> block(64 << 20);
  for (size_t i = 0; i < block.size(); i += 4096) block[i] = 1;
  const ProcessMemory after = ReadProcessMemory();
  EXPECT_GE(after.rss, before.rss + (60u << 20));
  EXPECT_GE(after.peak_rss, after.rss);

  char path[] = "/tmp/kvmem-rss-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::vector<char> data(8 << 20, 'x');
  ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  close(fd);
  {
    auto m = MappedFile::Open(path);
    ASSERT_TRUE(m.ok());
    EXPECT_LT(MappedFileRss(path), 1u << 20);  // mapped, not read yet (fault-around aside)
    unsigned sum = 0;
    for (size_t i = 0; i < m->size(); i += 4096) sum += m->data()[i];
    EXPECT_EQ(sum, 'x' * (m->size() / 4096));
    EXPECT_EQ(MappedFileRss(path), m->size());
  }
  EXPECT_EQ(MappedFileRss(path), 0u);  // unmapped
  EXPECT_EQ(MappedFileRss("/no/such/file"), 0u);
  std::remove(path);
}

}  // namespace
}  // namespace kvmem
