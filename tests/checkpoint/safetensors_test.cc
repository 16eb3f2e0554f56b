// Safetensors reader: every malformed-header case yields its one-line message;
// SafetensorsWriter round trips.

#include "checkpoint/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/safetensors_writer.h"
#include "checkpoint_test_util.h"

namespace dsv4 {
namespace {

using ::testing::HasSubstr;
using testing::OwnedTensor;
using testing::TempDir;

// A safetensors image: 8-byte length, `header` as given, `data_bytes` zeros.
std::vector<uint8_t> Image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n);
  out.insert(out.end(), header.begin(), header.end());
  out.resize(out.size() + data_bytes);
  return out;
}

std::string ParseError(const std::vector<uint8_t>& img) {
  auto r = checkpoint::ParseSafetensorsHeader(img.data(), img.size(), img.size(), "x.safetensors");
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_THAT(r.status().message(), ::testing::StartsWith("x.safetensors: "));
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  return r.status().message();
}

std::string ParseError(const std::string& header, size_t data_bytes) {
  return ParseError(Image(header, data_bytes));
}

TEST(SafetensorsHeader, AcceptsValidHeader) {
  const auto img = Image(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
      R"("a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
      R"("z":{"dtype":"I64","shape":[0,3],"data_offsets":[12,12]}})",
      12);
  auto r = checkpoint::ParseSafetensorsHeader(img.data(), img.size(), img.size(), "x");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->entries.size(), 3u);
  EXPECT_EQ(r->entries[0].name, "a");  // data-offset order
  EXPECT_EQ(r->entries[1].name, "b");
  EXPECT_EQ(r->entries[2].name, "z");
  EXPECT_EQ(r->entries[2].shape, (Shape{0, 3}));
  EXPECT_EQ(r->metadata.at("format"), "pt");
  EXPECT_EQ(r->data_start, img.size() - 12);
}

TEST(SafetensorsHeader, TruncatedBeforeLength) {
  EXPECT_THAT(ParseError(std::vector<uint8_t>{1, 2, 3}), HasSubstr("truncated: 3 bytes"));
  EXPECT_THAT(ParseError(std::vector<uint8_t>{}), HasSubstr("truncated: 0 bytes"));
}

TEST(SafetensorsHeader, CorruptHeaderLength) {
  auto img = Image("{}", 0);
  img[0] = 200;  // header length 200 > 10-byte file
  EXPECT_THAT(ParseError(img), HasSubstr("header length 200 exceeds the file size 10"));
  img[0] = 0;
  img[5] = 1;  // 2^40: beyond any real header
  EXPECT_THAT(ParseError(img), HasSubstr("header length 1099511627776 is implausible"));
  img.assign(8, 0xff);  // all-ones length must not overflow 8 + n
  EXPECT_THAT(ParseError(img), HasSubstr("is implausible"));
}

TEST(SafetensorsHeader, BadJson) {
  EXPECT_THAT(ParseError("{\"a\": ", 0), HasSubstr("header is not valid JSON"));
  EXPECT_THAT(ParseError("", 0), HasSubstr("header is not valid JSON"));
  EXPECT_THAT(ParseError("[1, 2]", 0), HasSubstr("header JSON is not an object"));
}

TEST(SafetensorsHeader, DeepNestingDoesNotOverflowTheStack) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_THAT(ParseError(deep, 0), HasSubstr("header JSON is not an object"));
  EXPECT_THAT(ParseError("{\"t\":" + deep + "}", 0), HasSubstr("header entry is not an object"));
}

TEST(SafetensorsHeader, BadEntries) {
  EXPECT_THAT(ParseError(R"({"t": [1]})", 0),
              HasSubstr("tensor 't': header entry is not an object"));
  EXPECT_THAT(ParseError(R"({"t": {"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4),
              HasSubstr("tensor 't': unknown header field 'x'"));
  EXPECT_THAT(ParseError(R"({"t": {"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4),
              HasSubstr("tensor 't': unsupported dtype 'Q4'"));
  EXPECT_THAT(ParseError(R"({"t": {"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4),
              HasSubstr("missing or non-string 'dtype'"));
  EXPECT_THAT(ParseError(R"({"t": {"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
              HasSubstr("non-integer or negative dimension"));
  EXPECT_THAT(ParseError(R"({"t": {"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
              HasSubstr("non-integer or negative dimension"));
  EXPECT_THAT(ParseError(R"({"t": {"dtype":"F32","shape":{},"data_offsets":[0,4]}})", 4),
              HasSubstr("missing or non-array 'shape'"));
  EXPECT_THAT(ParseError(R"({"t": {"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
              HasSubstr("'data_offsets' must be two non-negative integers"));
  EXPECT_THAT(ParseError(R"({"t": {"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4),
              HasSubstr("data_offsets end before begin"));
  EXPECT_THAT(ParseError(R"({"": {"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
              HasSubstr("empty tensor name"));
}

TEST(SafetensorsHeader, HugeShapes) {
  EXPECT_THAT(
      ParseError(R"({"t": {"dtype":"F32","shape":[2199023255553],"data_offsets":[0,4]}})", 4),
      HasSubstr("shape dimension too large"));
  EXPECT_THAT(ParseError(R"({"t": {"dtype":"F32","shape":[1099511627776,1099511627776],)"
                         R"("data_offsets":[0,4]}})",
                         4),
              HasSubstr("shape overflows"));
  EXPECT_THAT(ParseError(R"({"t": {"dtype":"F32","shape":[1],)"
                         R"("data_offsets":[0,18446744073709551615]}})",
                         4),
              HasSubstr("does not match"));
}

TEST(SafetensorsHeader, ByteSizeMismatch) {
  EXPECT_THAT(ParseError(R"({"t": {"dtype":"BF16","shape":[3,2],"data_offsets":[0,8]}})", 8),
              HasSubstr("tensor 't': byte size 8 does not match BF16 x [3, 2] = 12 bytes"));
}

TEST(SafetensorsHeader, OffsetsOutsideFile) {
  EXPECT_THAT(ParseError(R"({"t": {"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
              HasSubstr("tensor 't': data_offsets [0, 16] outside the data region of 8 bytes"));
}

TEST(SafetensorsHeader, DuplicateTensor) {
  EXPECT_THAT(ParseError(R"({"t": {"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("t": {"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         8),
              HasSubstr("tensor 't' appears twice in the header"));
}

TEST(SafetensorsHeader, OverlapGapAndTrailingBytes) {
  EXPECT_THAT(ParseError(R"({"a": {"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b": {"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                         8),
              HasSubstr("tensor 'b' overlaps tensor 'a'"));
  EXPECT_THAT(ParseError(R"({"a": {"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("b": {"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                         12),
              HasSubstr("tensor 'b' starts at byte 8 of the data region, leaving a gap"));
  EXPECT_THAT(ParseError(R"({"a": {"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 6),
              HasSubstr("data region is 6 bytes but the tensors cover 4"));
}

TEST(SafetensorsHeader, MetadataTypes) {
  EXPECT_THAT(ParseError(R"({"__metadata__": {"format": 1}})", 0),
              HasSubstr("__metadata__ value 'format' is not a string"));
  EXPECT_THAT(ParseError(R"({"__metadata__": [1]})", 0),
              HasSubstr("__metadata__ is not an object"));
}

TEST(SafetensorsHeader, HeaderNotFullyAvailable) {
  const auto img = Image("{}      ", 0);
  auto r = checkpoint::ParseSafetensorsHeader(img.data(), 9, img.size(), "x");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("header not fully available"));
}

TEST(SafetensorsFile, TruncatedShard) {
  TempDir dir;
  auto bytes = testing::ReadBytes(testing::TinyADir() + "/" + testing::kShard2);
  bytes.resize(bytes.size() - 100);
  const std::string path = dir.File("cut.safetensors");
  testing::WriteBytes(path, bytes);
  auto r = checkpoint::SafetensorsFile::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path + ": tensor '"));
  EXPECT_THAT(r.status().message(), HasSubstr("outside the data region"));
}

TEST(SafetensorsFile, CorruptLengthInRealShard) {
  TempDir dir;
  auto bytes = testing::ReadBytes(testing::TinyADir() + "/" + testing::kShard3);
  bytes[6] = 0x7f;
  const std::string path = dir.File("bad.safetensors");
  testing::WriteBytes(path, bytes);
  auto r = checkpoint::SafetensorsFile::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(path + ": header length"));
}

TEST(SafetensorsWriter, RoundTripAndPadding) {
  TempDir dir;
  const std::string path = dir.File("rt.safetensors");
  std::vector<uint8_t> a(6 * 2), b(3 * 4), c(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(255 - i);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<uint8_t>(i);
  auto w = checkpoint::SafetensorsWriter::Create(path,
                                                 {{"a.weight", DType::kBF16, {2, 3}},
                                                  {"empty", DType::kF32, {0, 4}},
                                                  {"b", DType::kF32, {3}},
                                                  {"c", DType::kF8E4M3, {5}}},
                                                 {{"format", "pt"}});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)->data_bytes(), 12u + 12u + 5u);
  ASSERT_TRUE((*w)->Write("a.weight", a.data(), 5).ok());  // chunked
  ASSERT_TRUE((*w)->Write("a.weight", a.data() + 5, 7).ok());
  ASSERT_TRUE((*w)->Write("empty", nullptr, 0).ok());
  ASSERT_TRUE((*w)->Write("b", b.data(), b.size()).ok());
  EXPECT_FALSE(std::filesystem::exists(path));  // nothing published before Finish
  ASSERT_TRUE((*w)->Write("c", c.data(), c.size()).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  EXPECT_FALSE(std::filesystem::exists(dir.File(".rt.safetensors.tmp")));

  auto f = checkpoint::SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->header().data_start % 8, 0u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  EXPECT_EQ((*f)->file_size(), (*f)->header().data_start + 29);
  const TensorView* va = (*f)->Find("a.weight");
  ASSERT_NE(va, nullptr);
  EXPECT_EQ(va->dtype, DType::kBF16);
  EXPECT_EQ(va->shape, (Shape{2, 3}));
  EXPECT_EQ(std::vector<uint8_t>(va->as<uint8_t>(), va->as<uint8_t>() + 12), a);
  const TensorView* vb = (*f)->Find("b");
  EXPECT_EQ(std::vector<uint8_t>(vb->as<uint8_t>(), vb->as<uint8_t>() + 12), b);
  const TensorView* vc = (*f)->Find("c");
  EXPECT_EQ(std::vector<uint8_t>(vc->as<uint8_t>(), vc->as<uint8_t>() + 5), c);
  EXPECT_EQ((*f)->Find("empty")->shape, (Shape{0, 4}));
}

TEST(SafetensorsWriter, RewritesRealShardIdentically) {
  TempDir dir;
  const std::string src = testing::TinyADir() + "/" + testing::kShard1;
  const std::vector<OwnedTensor> tensors = testing::ReadAllTensors(src);
  testing::WriteAllTensors(dir.File("copy.safetensors"), tensors);
  const std::vector<OwnedTensor> again = testing::ReadAllTensors(dir.File("copy.safetensors"));
  ASSERT_EQ(tensors.size(), again.size());
  std::map<std::string, const OwnedTensor*> by_name;
  for (const auto& t : again) by_name[t.name] = &t;
  for (const auto& t : tensors) {
    ASSERT_EQ(by_name.count(t.name), 1u) << t.name;
    EXPECT_EQ(t.dtype, by_name[t.name]->dtype);
    EXPECT_EQ(t.shape, by_name[t.name]->shape);
    EXPECT_EQ(t.bytes, by_name[t.name]->bytes) << t.name;
  }
}

TEST(SafetensorsWriter, OutOfOrderWritesAndAlignedLayout) {
  TempDir dir;
  const std::string path = dir.File("al.safetensors");
  // Odd byte sizes first: declared order would misalign everything after them.
  const std::vector<checkpoint::SafetensorsTensorInfo> infos = {{"s", DType::kF8E8M0, {3}},
                                                                {"h", DType::kBF16, {3}},
                                                                {"f", DType::kF32, {3}},
                                                                {"q", DType::kI64, {2}},
                                                                {"b", DType::kI8, {1}}};
  auto w = checkpoint::SafetensorsWriter::Create(path, infos);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const std::vector<uint8_t> f = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  ASSERT_TRUE((*w)->Write("f", f.data(), 12).ok());
  const std::vector<uint8_t> q(16, 0xab);
  ASSERT_TRUE((*w)->Write("q", q.data(), 16).ok());
  const std::vector<uint8_t> s = {7, 8, 9};
  ASSERT_TRUE((*w)->Write("s", s.data(), 2).ok());
  ASSERT_TRUE((*w)->Write("b", s.data(), 1).ok());
  ASSERT_TRUE((*w)->Write("s", s.data() + 2, 1).ok());
  const std::vector<uint8_t> h = {1, 0, 2, 0, 3, 0};
  ASSERT_TRUE((*w)->Write("h", h.data(), 6).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  auto file = checkpoint::SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  for (const auto& info : infos) {
    const TensorView* v = (*file)->Find(info.name);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % DTypeSize(info.dtype), 0u) << info.name;
  }
  auto bytes_of = [&](const char* name) {
    const TensorView* v = (*file)->Find(name);
    return std::vector<uint8_t>(v->as<uint8_t>(), v->as<uint8_t>() + v->nbytes());
  };
  EXPECT_EQ(bytes_of("f"), f);
  EXPECT_EQ(bytes_of("q"), q);
  EXPECT_EQ(bytes_of("s"), s);
  EXPECT_EQ(bytes_of("h"), h);
  EXPECT_EQ(bytes_of("b"), std::vector<uint8_t>{7});
}

TEST(SafetensorsWriter, MisuseIsAnErrorAndPublishesNothing) {
  TempDir dir;
  const std::string path = dir.File("bad.safetensors");
  const uint8_t bytes[8] = {};
  {
    auto w = checkpoint::SafetensorsWriter::Create(
        path, {{"x", DType::kF32, {1}}, {"y", DType::kF32, {1}}});
    ASSERT_TRUE(w.ok());
    EXPECT_THAT((*w)->Write("z", bytes, 4).message(), HasSubstr("tensor 'z' was not declared"));
    // A failed writer stays failed.
    EXPECT_EQ((*w)->Write("x", bytes, 4).code(), StatusCode::kFailedPrecondition);
    EXPECT_FALSE((*w)->Finish().ok());
  }
  {
    auto w = checkpoint::SafetensorsWriter::Create(path, {{"x", DType::kF32, {1}}});
    ASSERT_TRUE(w.ok());
    EXPECT_THAT((*w)->Write("x", bytes, 8).message(), HasSubstr("more than its 4 bytes"));
  }
  {
    auto w = checkpoint::SafetensorsWriter::Create(path, {{"x", DType::kF32, {1}}});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write("x", bytes, 4).ok());
    EXPECT_THAT((*w)->Write("x", bytes, 4).message(), HasSubstr("tensor 'x' is already complete"));
  }
  {
    auto w = checkpoint::SafetensorsWriter::Create(path, {{"x", DType::kF32, {2}}});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write("x", bytes, 4).ok());
    EXPECT_THAT((*w)->Finish().message(), HasSubstr("tensor 'x' is incomplete (4 of 8 bytes"));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(dir.File(".bad.safetensors.tmp")));
  EXPECT_THAT(checkpoint::SafetensorsWriter::Create(
                  path, {{"x", DType::kF32, {1}}, {"x", DType::kF32, {1}}})
                  .status()
                  .message(),
              HasSubstr("tensor 'x' given twice"));
  EXPECT_THAT(checkpoint::SafetensorsWriter::Create(path, {{"__metadata__", DType::kF32, {1}}})
                  .status()
                  .message(),
              HasSubstr("invalid tensor name"));
  EXPECT_THAT(
      checkpoint::SafetensorsWriter::Create(path, {{"x", DType::kF32, {-1}}}).status().message(),
      HasSubstr("negative dimension"));
  EXPECT_EQ(checkpoint::SafetensorsWriter::Create(dir.File("no/such/dir.safetensors"), {})
                .status()
                .code(),
            StatusCode::kIoError);
}

TEST(SafetensorsWriter, AtomicFileReplace) {
  TempDir dir;
  const std::string path = dir.File("config.json");
  ASSERT_TRUE(checkpoint::WriteFileAtomic(path, "first").ok());
  ASSERT_TRUE(checkpoint::WriteFileAtomic(path, "second").ok());
  EXPECT_EQ(testing::ReadText(path), "second");
  EXPECT_FALSE(std::filesystem::exists(dir.File(".config.json.tmp")));
}

}  // namespace
}  // namespace dsv4
