// The local-directory tier of the Redis store's block cache (disk_cache.h): what was put is got
// back byte for byte, by this process or the next; a file that is damaged, cut short or holds
// another key's object is a miss and is removed; the directory stays within its bound, least
// recently used first.
#include "memory/store/disk_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "memory/store/hash.h"
#include "test_util.h"

namespace kvmem::memory::store {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string FileOf(const TempDir& dir, std::string_view key) {
  return dir.path() + "/" + Xxh128Hex(key);
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void Spill(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(DiskCacheTest, KeepsObjectsAcrossProcesses) {
  TempDir dir;
  const std::string big(100000, 'x');
  {
    auto c = DiskCache::Open(dir.path(), 1 << 20);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ((*c)->Get("k:a"), nullptr);
    (*c)->Put("k:a", "alpha");
    (*c)->Put("k:big", big);
    (*c)->Put("k:empty", "");
    ASSERT_NE((*c)->Get("k:a"), nullptr);
    EXPECT_EQ(*(*c)->Get("k:a"), "alpha");
  }
  auto c = DiskCache::Open(dir.path(), 1 << 20);  // the next process
  ASSERT_TRUE(c.ok());
  EXPECT_GT((*c)->bytes(), big.size());
  ASSERT_NE((*c)->Get("k:big"), nullptr);
  EXPECT_EQ(*(*c)->Get("k:big"), big);
  ASSERT_NE((*c)->Get("k:empty"), nullptr);
  EXPECT_EQ(*(*c)->Get("k:empty"), "");
  (*c)->Remove("k:a");
  EXPECT_EQ((*c)->Get("k:a"), nullptr);
  EXPECT_FALSE(fs::exists(FileOf(dir, "k:a")));
}

TEST(DiskCacheTest, ADamagedFileIsAMissAndIsRemoved) {
  TempDir dir;
  auto c = DiskCache::Open(dir.path(), 1 << 20);
  ASSERT_TRUE(c.ok());
  const std::string object(5000, 'o');
  const std::string path = FileOf(dir, "k:a");
  // Every byte of the file counts: the object, the key, its length, the digest.
  const size_t key_at = object.size(), len_at = key_at + 3, last = SIZE_MAX;
  for (size_t at : {size_t{0}, object.size() - 1, key_at + 1, len_at + 1, last}) {
    (*c)->Put("k:a", object);
    std::string bytes = Slurp(path);
    ASSERT_GT(bytes.size(), object.size());
    if (at >= bytes.size()) at = bytes.size() - 1;
    bytes[at] ^= 0x20;
    Spill(path, bytes);
    EXPECT_EQ((*c)->Get("k:a"), nullptr) << "byte " << at;
    EXPECT_FALSE(fs::exists(path));
  }
  // Cut short.
  (*c)->Put("k:a", object);
  Spill(path, Slurp(path).substr(0, object.size() / 2));
  EXPECT_EQ((*c)->Get("k:a"), nullptr);
  // Another key's file under this key's name: its digest holds, its key does not.
  (*c)->Put("k:b", object);
  fs::copy_file(FileOf(dir, "k:b"), path, fs::copy_options::overwrite_existing);
  EXPECT_EQ((*c)->Get("k:a"), nullptr);
  ASSERT_NE((*c)->Get("k:b"), nullptr);
  EXPECT_EQ(*(*c)->Get("k:b"), object);
}

TEST(DiskCacheTest, StaysWithinItsBoundLeastRecentlyUsedFirst) {
  TempDir dir;
  const std::string object(1000, 'o');
  auto c = DiskCache::Open(dir.path(), 3500);  // three objects with their trailers
  ASSERT_TRUE(c.ok());
  (*c)->Put("k:1", object);
  (*c)->Put("k:2", object);
  (*c)->Put("k:3", object);
  ASSERT_NE((*c)->Get("k:1"), nullptr);  // now 2 is the least recently used
  (*c)->Put("k:4", object);
  EXPECT_LE((*c)->bytes(), 3500u);
  EXPECT_EQ((*c)->Get("k:2"), nullptr);
  EXPECT_NE((*c)->Get("k:1"), nullptr);
  EXPECT_NE((*c)->Get("k:3"), nullptr);
  EXPECT_NE((*c)->Get("k:4"), nullptr);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 3u);
  // An object larger than the whole bound is not kept.
  (*c)->Put("k:huge", std::string(5000, 'h'));
  EXPECT_EQ((*c)->Get("k:huge"), nullptr);
  // A new process sees the files on disk, oldest first, and keeps to its bound too.
  auto small = DiskCache::Open(dir.path(), 2500);
  ASSERT_TRUE(small.ok());
  EXPECT_LE((*small)->bytes(), 2500u);
}

TEST(DiskCacheTest, ADirectoryThatCannotBeMadeIsAnError) {
  TempDir dir;
  Spill(dir.path() + "/file", "x");
  auto c = DiskCache::Open(dir.path() + "/file/sub", 1 << 20);
  EXPECT_EQ(c.status().code(), ErrorCode::kIo);
}

}  // namespace
}  // namespace kvmem::memory::store
