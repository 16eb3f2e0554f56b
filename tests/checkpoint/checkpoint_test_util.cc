#include "checkpoint_test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"

namespace dsv4::testing {

namespace fs = std::filesystem;

std::string TinyADir() { return std::string(DSV4_TEST_DATA_DIR) + "/golden/tiny-a"; }

TempDir::TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "dsv4_ckpt_test_XXXXXX").string();
  char* p = ::mkdtemp(tmpl.data());
  if (p == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void CopyTinyA(const std::string& dir) {
  for (const char* name : {"config.json", kIndex, kShard1, kShard2, kShard3}) {
    fs::copy_file(TinyADir() + "/" + name, dir + "/" + name);
  }
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  const std::string s = ReadText(path);
  return std::vector<uint8_t>(s.begin(), s.end());
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  WriteText(path, std::string(bytes.begin(), bytes.end()));
}

std::vector<OwnedTensor> ReadAllTensors(const std::string& safetensors_path) {
  auto f = checkpoint::SafetensorsFile::Open(safetensors_path);
  if (!f.ok()) throw std::runtime_error(f.status().ToString());
  std::vector<OwnedTensor> out;
  // Header entries are in data-offset order: keep it, so a rewrite is
  // byte-identical apart from the header.
  for (const auto& e : (*f)->header().entries) {
    const TensorView* v = (*f)->Find(e.name);
    const auto* p = static_cast<const uint8_t*>(v->data);
    out.push_back({e.name, e.dtype, e.shape, std::vector<uint8_t>(p, p + v->nbytes())});
  }
  return out;
}

void WriteAllTensors(const std::string& path, const std::vector<OwnedTensor>& tensors) {
  std::vector<checkpoint::SafetensorsTensorData> data;
  for (const auto& t : tensors) data.push_back({t.name, t.dtype, t.shape, t.bytes.data()});
  Status s = checkpoint::WriteSafetensorsFile(path, data, {{"format", "pt"}});
  ASSERT_TRUE(s.ok()) << s.ToString();
}

void EditShard(const std::string& path,
               const std::function<void(std::vector<OwnedTensor>&)>& edit) {
  std::vector<OwnedTensor> tensors = ReadAllTensors(path);
  edit(tensors);
  WriteAllTensors(path, tensors);
}

void EditIndex(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = dir + "/" + kIndex;
  nlohmann::json j = nlohmann::json::parse(ReadText(path));
  edit(j);
  WriteText(path, j.dump(2));
}

}  // namespace dsv4::testing
