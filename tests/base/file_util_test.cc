// Files a user names: FIFOs, devices and directories are refused without
// blocking, symlink loops are named (base/file_util.h); data checksums
// (base/checksum.h); thread counts the OS might refuse (base/thread_pool.h).
#include "base/file_util.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/checksum.h"
#include "base/mapped_file.h"
#include "base/thread_pool.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dsv4-file_util-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "file.txt") << "hello";
    ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0644), 0);
    fs::create_symlink(dir_ / "loop_b", dir_ / "loop_a");
    fs::create_symlink(dir_ / "loop_a", dir_ / "loop_b");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string P(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// Every check must come back at once: a blocking open of a FIFO would hang
// the test (ctest's timeout would then report it).
TEST_F(FileUtilTest, FifoIsRefusedWithoutBlocking) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<int> fd = OpenRegularFile(P("fifo"));
  EXPECT_EQ(fd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(fd.status().message(), HasSubstr("is a FIFO, expected a regular file"));
  EXPECT_THAT(ReadRegularFile(P("fifo")).status().message(), HasSubstr("is a FIFO"));
  EXPECT_THAT(ReadFileToString(P("fifo")).status().message(), HasSubstr("is a FIFO"));
  EXPECT_THAT(MappedFile::Open(P("fifo")).status().message(), HasSubstr("is a FIFO"));
  EXPECT_THAT(CheckRegularFile(P("fifo")).message(), HasSubstr("is a FIFO"));
  EXPECT_THAT(ReadRegularFile("/dev/zero").status().message(), HasSubstr("character device"));
  EXPECT_THAT(ReadRegularFile(dir_.string()).status().message(), HasSubstr("is a directory"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST_F(FileUtilTest, SymlinkLoopIsNamed) {
  for (const Status& s :
       {OpenRegularFile(P("loop_a")).status(), CheckRegularFile(P("loop_a")),
        ReadRegularFile(P("loop_a") + "/config.json").status(),
        CheckDirectory(P("loop_a"), "model directory"), PathExists(P("loop_a")).status(),
        MappedFile::Open(P("loop_b")).status()}) {
    EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("symlink loop")) << s.ToString();
    EXPECT_EQ(s.message().find('\n'), std::string::npos);
  }
  EXPECT_THAT(CheckDirectory(P("loop_a"), "model directory").message(),
              HasSubstr("model directory " + P("loop_a")));
}

TEST_F(FileUtilTest, RegularFilesDirectoriesAndAbsence) {
  Result<std::string> text = ReadRegularFile(P("file.txt"));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "hello");
  EXPECT_EQ(ReadRegularFile(P("file.txt"), 4).status().code(), StatusCode::kInvalidArgument);
  Result<int> fd = OpenRegularFile(P("file.txt"));
  ASSERT_TRUE(fd.ok());
  EXPECT_EQ(::fcntl(*fd, F_GETFL) & O_NONBLOCK, 0);  // blocking reads after the check
  ::close(*fd);
  EXPECT_TRUE(CheckDirectory(dir_.string(), "dir").ok());
  EXPECT_THAT(CheckDirectory(P("file.txt"), "--model").message(), HasSubstr("is not a directory"));
  EXPECT_EQ(CheckDirectory(P("missing"), "--model").code(), StatusCode::kNotFound);
  EXPECT_EQ(OpenRegularFile(P("missing")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*PathExists(P("file.txt")), true);
  EXPECT_EQ(*PathExists(P("missing")), false);
  EXPECT_EQ(*PathExists(P("file.txt/below")), false);  // ENOTDIR is absence
  fs::create_hard_link(P("file.txt"), P("hard"));
  fs::create_symlink(P("file.txt"), P("soft"));
  EXPECT_TRUE(SameFile(P("file.txt"), P("hard")));
  EXPECT_TRUE(SameFile(P("soft"), P("file.txt")));
  EXPECT_FALSE(SameFile(P("file.txt"), P("missing")));
  EXPECT_FALSE(SameFile(P("file.txt"), dir_.string()));
}

// /proc and /sys files report a size that is not their length; their text
// is read to the end, and a "Key:  N kB" field comes back in bytes.
TEST(ProcFiles, PseudoFileIsReadWholeAndKibFieldsParse) {
  const std::string status = ReadPseudoFile("/proc/self/status");
  EXPECT_NE(status.find("VmSize:"), std::string::npos);
  EXPECT_GT(KibFieldBytes(status, "VmSize:"), 0);
  EXPECT_EQ(ReadPseudoFile("/proc/self/no-such-file"), "");
  const std::string meminfo = "MemTotal:       24683520 kB\nMemAvailable:      42 kB\n";
  EXPECT_EQ(KibFieldBytes(meminfo, "MemAvailable:"), 42 * 1024);
  EXPECT_EQ(KibFieldBytes(meminfo, "MemTotal:"), int64_t{24683520} * 1024);
  EXPECT_EQ(KibFieldBytes(meminfo, "SwapTotal:"), 0);
}

TEST(Checksum, StreamingParallelAndFileFormsAgree) {
  // Three chunks (the last one short) so the chunking itself is exercised.
  std::vector<uint8_t> data(2 * kChecksumChunkBytes + 12345);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  const uint64_t one = ChecksumOf(data.data(), data.size(), 1);
  EXPECT_EQ(ChecksumOf(data.data(), data.size(), 4), one);
  ChunkedChecksum streamed;
  for (size_t at = 0; at < data.size();) {  // odd pieces that straddle chunk ends
    const size_t n = std::min<size_t>(data.size() - at, 7777777);
    streamed.Update(data.data() + at, n);
    at += n;
  }
  EXPECT_EQ(streamed.Finish(), one);
  const std::string path =
      (fs::temp_directory_path() / ("dsv4-checksum-" + std::to_string(::getpid()))).string();
  {
    std::ofstream f(path, std::ios::binary);
    f.write("HEADER", 6);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  Result<uint64_t> from_file = ChecksumOfFile(fd, 6, data.size(), path);
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_EQ(*from_file, one);
  // Chunks hashed on several threads (claimed, not assigned): the same value.
  Result<uint64_t> threaded = ChecksumOfFile(fd, 6, data.size(), path, 3);
  ASSERT_TRUE(threaded.ok()) << threaded.status().ToString();
  EXPECT_EQ(*threaded, one);
  EXPECT_EQ(ChecksumOfFile(fd, 6, data.size() + 1, path).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(ChecksumOfFile(fd, 6, data.size() + 1, path, 3).status().code(), StatusCode::kDataLoss);
  ::close(fd);
  fs::remove(path);
  // One flipped bit anywhere changes it.
  for (size_t at : {size_t{0}, static_cast<size_t>(kChecksumChunkBytes), data.size() - 1}) {
    data[at] ^= 1;
    EXPECT_NE(ChecksumOf(data.data(), data.size(), 2), one) << at;
    data[at] ^= 1;
  }
  EXPECT_NE(ChecksumOf(data.data(), 0, 1), ChecksumOf(data.data(), 1, 1));
}

TEST(Checksum, HexRoundTrip) {
  uint64_t v = 0;
  EXPECT_EQ(ChecksumHex(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_TRUE(ParseChecksumHex("0123456789abcdef", &v));
  EXPECT_EQ(v, 0x0123456789abcdefull);
  EXPECT_FALSE(ParseChecksumHex("0123456789ABCDEF", &v));
  EXPECT_FALSE(ParseChecksumHex("0123", &v));
  EXPECT_FALSE(ParseChecksumHex("0123456789abcdeg", &v));
}

TEST(ThreadPool, CreateChecksTheCount) {
  EXPECT_EQ(ThreadPool::Create(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(ThreadPool::Create(kMaxThreads + 1).status().message(),
              HasSubstr("a pool takes 1 to 1024"));
  Result<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(3);
  ASSERT_TRUE(pool.ok());
  std::atomic<int64_t> sum{0};
  (*pool)->ParallelFor(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
  EXPECT_TRUE(CheckThreadsCanStart(64).ok());
}

}  // namespace
}  // namespace dsv4
