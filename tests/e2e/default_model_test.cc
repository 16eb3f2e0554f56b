// The default-model resolution of serve / generate / eval / bench
// (apps/dsv4/default_model.h): --model, then $DSV4_MODEL, then
// models/dsv4-mini in the search directories or their parents.
#include "default_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace dsv4::cli {
namespace {

namespace fs = std::filesystem;

class DefaultModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Under the system temp directory, not the build tree: a checkout above
    // the build tree may hold a real models/dsv4-mini.
    root_ = fs::temp_directory_path() /
            ("dsv4-default_model-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // <dir>/models/dsv4-mini with a config.json.
  fs::path MakeModel(const fs::path& dir) {
    const fs::path m = dir / "models" / "dsv4-mini";
    fs::create_directories(m);
    std::ofstream(m / "config.json") << "{}";
    return m;
  }

  fs::path root_;
};

TEST_F(DefaultModelTest, FlagWinsOverEnvAndDefault) {
  MakeModel(root_);
  auto r = ResolveModelDir("/some/flag/dir", root_.string(), {root_.string()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->dir, "/some/flag/dir");
  EXPECT_EQ(r->source, "--model");
}

TEST_F(DefaultModelTest, EnvWinsOverDefault) {
  MakeModel(root_);
  const fs::path env = root_ / "other";
  fs::create_directories(env);
  auto r = ResolveModelDir("", env.string(), {root_.string()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->dir, env.string());
  EXPECT_EQ(r->source, "$DSV4_MODEL");
  // An env value that is not a directory is an error, not a fall-through.
  auto bad = ResolveModelDir("", (root_ / "missing").string(), {root_.string()});
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_NE(bad.status().message().find("$DSV4_MODEL"), std::string::npos);
}

TEST_F(DefaultModelTest, DefaultFoundInSearchDirOrAParent) {
  const fs::path repo = root_ / "repo";
  const fs::path model = MakeModel(repo);
  const fs::path deep = repo / "build" / "release" / "apps" / "dsv4";
  fs::create_directories(deep);
  auto r = ResolveModelDir("", "", {deep.string()});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(fs::path(r->dir), model);
  EXPECT_EQ(r->source, "default");
  auto same = ResolveModelDir("", "", {repo.string()});
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(fs::path(same->dir), model);
}

TEST_F(DefaultModelTest, SearchDirsInOrderNearestParentFirst) {
  // The executable's tree comes before the working directory's.
  const fs::path exe_repo = root_ / "exe_repo";
  const fs::path cwd_repo = root_ / "cwd_repo";
  const fs::path exe_model = MakeModel(exe_repo);
  const fs::path cwd_model = MakeModel(cwd_repo);
  auto r = ResolveModelDir("", "", {(exe_repo / "bin").string(), cwd_repo.string()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(fs::path(r->dir), exe_model);
  // Not under the first search dir (nor its parents): the second one is used.
  fs::create_directories(root_ / "elsewhere" / "bin");
  auto second = ResolveModelDir(
      "", "", {"", (root_ / "elsewhere" / "bin").string(), (cwd_repo / "sub").string()});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(fs::path(second->dir), cwd_model);
  // A nested models/dsv4-mini closer to the search dir wins over one higher up.
  const fs::path inner = MakeModel(exe_repo / "nested");
  auto nearest = ResolveModelDir("", "", {(exe_repo / "nested" / "x").string()});
  ASSERT_TRUE(nearest.ok());
  EXPECT_EQ(fs::path(nearest->dir), inner);
}

TEST_F(DefaultModelTest, PlaceholderWithoutConfigIsSkipped) {
  const fs::path repo = root_ / "repo";
  fs::create_directories(repo / "inner" / "models" / "dsv4-mini");  // no config.json
  const fs::path model = MakeModel(repo);
  auto r = ResolveModelDir("", "", {(repo / "inner").string()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(fs::path(r->dir), model);
}

TEST_F(DefaultModelTest, NothingFoundSaysWhereItLookedAndWhatToDo) {
  auto r = ResolveModelDir("", "", {"/"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("models/dsv4-mini/config.json in /"), std::string::npos) << m;
  EXPECT_NE(m.find("--model"), std::string::npos) << m;
  EXPECT_NE(m.find("$DSV4_MODEL"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace dsv4::cli
