#include "default_model.h"

#include <cstdlib>
#include <filesystem>

#include "base/file_util.h"
#include "base/logging.h"

namespace dsv4::cli {

namespace fs = std::filesystem;

Result<ModelLocation> ResolveModelDir(const std::string& flag, const std::string& env,
                                      const std::vector<std::string>& search_dirs) {
  if (!flag.empty()) return ModelLocation{flag, "--model"};
  std::error_code ec;
  if (!env.empty()) {
    if (!fs::is_directory(env, ec)) {
      return NotFound("$DSV4_MODEL is '{}', which is not a directory", env);
    }
    return ModelLocation{env, "$DSV4_MODEL"};
  }
  std::string looked;
  for (const std::string& dir : search_dirs) {
    if (dir.empty()) continue;
    fs::path d = fs::absolute(dir, ec);
    if (ec) continue;
    looked += (looked.empty() ? "" : ", ") + d.string();
    for (;;) {
      const fs::path candidate = d / kDefaultModelSubdir;
      if (fs::is_regular_file(candidate / "config.json", ec)) {
        return ModelLocation{candidate.string(), "default"};
      }
      if (!d.has_relative_path()) break;  // reached the root
      d = d.parent_path();
    }
  }
  return NotFound(
      "no model given and no default model found: looked for {}/config.json in {} and their "
      "parents; pass --model DIR, set $DSV4_MODEL, or run inside a dsv4 checkout, whose "
      "{} holds the default model",
      kDefaultModelSubdir, looked.empty() ? std::string("no directory") : looked,
      kDefaultModelSubdir);
}

Result<ModelLocation> ResolveModel(const std::string& flag) {
  const char* env = std::getenv("DSV4_MODEL");
  std::vector<std::string> dirs;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path().string());
  const fs::path cwd = fs::current_path(ec);
  if (!ec) dirs.push_back(cwd.string());
  DSV4_ASSIGN_OR_RETURN(ModelLocation m, ResolveModelDir(flag, env != nullptr ? env : "", dirs));
  // One line before anything is loaded: a missing directory, a file, a
  // symlink loop (stat, never a throwing std::filesystem call).
  if (m.source == "--model") DSV4_RETURN_IF_ERROR(CheckDirectory(m.dir, "model directory"));
  // A directory that is not a checkpoint says so, before any file in it
  // (tokenizer.json, a shard) is reported missing.
  DSV4_ASSIGN_OR_RETURN(const bool has_config, PathExists(m.dir + "/config.json"));
  if (!has_config) {
    return NotFound("model directory {} has no config.json: not a DeepSeek-V4 checkpoint", m.dir);
  }
  return m;
}

std::string ModelName(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const size_t slash = d.rfind('/');
  return slash == std::string::npos ? d : d.substr(slash + 1);
}

void LogModel(const ModelLocation& model) {
  DSV4_LOG_INFO("model: {} ({})", model.dir,
                model.source == "default" ? std::string("the embedded default model")
                                          : "from " + model.source);
}

}  // namespace dsv4::cli
