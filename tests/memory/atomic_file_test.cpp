// WriteFileAtomic: the new content replaces the old whole; every injected failure (short
// writes, EIO from fsync, ENOSPC, a failing rename) returns an error, leaves the previous
// version and no temp file behind, and fsync is called once, never retried. Leftover temps are
// removed; reads refuse symlinks.
#include "memory/store/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "test_util.h"

namespace kvmem::memory::store {
namespace {

using testing::ListNames;
using testing::ReadAll;
using testing::TempDir;

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

struct FailingFsync : FileOps {
  int calls = 0;
  int Fsync(int) override {
    ++calls;
    errno = EIO;
    return -1;
  }
};
struct FullDiskWrite : FileOps {
  ssize_t Write(int, const void*, size_t) override {
    errno = ENOSPC;
    return -1;
  }
};
// One byte per call, with an EINTR between: the loop must still write everything.
struct TrickleWrite : FileOps {
  int calls = 0;
  ssize_t Write(int fd, const void* buf, size_t n) override {
    if (++calls % 2 == 0) {
      errno = EINTR;
      return -1;
    }
    return FileOps::Write(fd, buf, n > 0 ? 1 : 0);
  }
};
struct StuckWrite : FileOps {
  ssize_t Write(int, const void*, size_t) override { return 0; }
};
struct FailingRename : FileOps {
  int Rename(const char*, const char*) override {
    errno = EXDEV;
    return -1;
  }
};

TEST(AtomicFileTest, WritesAndReplaces) {
  TempDir dir;
  ASSERT_TRUE(WriteFileAtomic(dir.path(), "a.json", Bytes("first")).ok());
  EXPECT_EQ(ReadAll(dir / "a.json"), Bytes("first"));
  const std::span<const uint8_t> none;
  const std::vector<uint8_t> p1 = Bytes("sec"), p2 = Bytes("ond");
  const std::span<const uint8_t> pieces[] = {p1, none, p2};
  ASSERT_TRUE(WriteFileAtomic(dir.path(), "a.json", pieces).ok());
  EXPECT_EQ(ReadAll(dir / "a.json"), Bytes("second"));
  EXPECT_EQ(ListNames(dir.path()), std::vector<std::string>{"a.json"});
  struct stat st {};
  ASSERT_EQ(::stat((dir / "a.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  std::vector<uint8_t> got;
  ASSERT_TRUE(ReadFileNoFollow(dir.path(), "a.json", 100, &got).ok());
  EXPECT_EQ(got, Bytes("second"));
}

TEST(AtomicFileTest, ShortWritesAndEintrAreRetried) {
  TempDir dir;
  TrickleWrite ops;
  const std::string text(300, 'x');
  ASSERT_TRUE(WriteFileAtomic(dir.path(), "f", Bytes(text), ops).ok());
  EXPECT_EQ(ReadAll(dir / "f"), Bytes(text));
}

TEST(AtomicFileTest, FailuresKeepThePreviousVersion) {
  FailingFsync failing_fsync;
  FullDiskWrite full_disk;
  StuckWrite stuck;
  FailingRename failing_rename;
  struct Case {
    const char* what;
    FileOps* ops = nullptr;
    const char* needle = "";
  };
  const Case cases[] = {{"fsync EIO", &failing_fsync, "fsync"},
                        {"ENOSPC", &full_disk, "write"},
                        {"no progress", &stuck, "no progress"},
                        {"rename", &failing_rename, "rename"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TempDir dir;
    ASSERT_TRUE(WriteFileAtomic(dir.path(), "m.json", Bytes("old")).ok());
    failing_fsync.calls = 0;
    Status st = WriteFileAtomic(dir.path(), "m.json", Bytes("new content"), *c.ops);
    EXPECT_EQ(st.code(), ErrorCode::kIo);
    EXPECT_NE(st.message().find(c.needle), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("previous version kept"), std::string::npos) << st.message();
    EXPECT_EQ(ReadAll(dir / "m.json"), Bytes("old"));
    EXPECT_EQ(ListNames(dir.path()), std::vector<std::string>{"m.json"}) << "temp file left";
    if (c.ops == &failing_fsync) {
      EXPECT_EQ(failing_fsync.calls, 1) << "fsync retried";
    }
  }
}

TEST(AtomicFileTest, RejectsNamesThatAreNotPlain) {
  TempDir dir;
  for (const char* name : {"", ".", "..", "a/b", "/etc/passwd", ".kvmem-tmp.x"}) {
    Status st = WriteFileAtomic(dir.path(), name, Bytes("x"));
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << name;
  }
  EXPECT_EQ(WriteFileAtomic(dir / "missing-dir", "f", Bytes("x")).code(), ErrorCode::kIo);
}

TEST(AtomicFileTest, RemovesLeftoverTemps) {
  TempDir dir;
  testing::WriteAll(dir / ".kvmem-tmp.manifest.json.abc123", Bytes("partial"));
  testing::WriteAll(dir / ".kvmem-tmp.kv-1.safetensors.def", Bytes("partial"));
  testing::WriteAll(dir / "keep.json", Bytes("x"));
  Result<int> n = RemoveLeftoverTemps(dir.path());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2);
  EXPECT_EQ(ListNames(dir.path()), std::vector<std::string>{"keep.json"});
}

TEST(AtomicFileTest, ReadRefusesSymlinksAndLimits) {
  TempDir dir;
  testing::WriteAll(dir / "real", Bytes("secret"));
  std::filesystem::create_symlink(dir / "real", dir / "link");
  std::vector<uint8_t> got;
  Status st = ReadFileNoFollow(dir.path(), "link", 100, &got);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("symlink"), std::string::npos) << st.message();
  st = ReadFileNoFollow(dir.path(), "real", 3, &got);
  EXPECT_EQ(st.code(), ErrorCode::kCorrupt);
  EXPECT_NE(st.message().find("more than the 3 expected"), std::string::npos) << st.message();
  EXPECT_EQ(ReadFileNoFollow(dir.path(), "absent", 3, &got).code(), ErrorCode::kNotFound);
  std::filesystem::create_directory(dir / "sub");
  EXPECT_EQ(ReadFileNoFollow(dir.path(), "sub", 3, &got).code(), ErrorCode::kInvalidArgument);

  // MakeDir refuses a symlink in place of a directory.
  std::filesystem::create_directory_symlink(dir / "sub", dir / "sublink");
  EXPECT_EQ(MakeDir(dir / "sublink").code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(MakeDir(dir / "sub").ok());
  EXPECT_TRUE(MakeDir(dir / "new").ok());
}

}  // namespace
}  // namespace kvmem::memory::store
