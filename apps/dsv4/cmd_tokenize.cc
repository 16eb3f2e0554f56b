// tokenize: JSONL training documents -> token ids (tokenize_jsonl.h).
#include <chrono>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "tokenize_jsonl.h"

namespace dsv4::cli {

namespace {

struct TokenizeArgs {
  std::string tokenizer;  // a directory holding tokenizer.json, or the file itself
  std::string input;
  std::string output;
};

int RunTokenize(const TokenizeArgs& a) {
  std::string path = a.tokenizer;
  std::error_code ec;  // a symlink loop reads as "not a directory"; Load names it
  if (std::filesystem::is_directory(path, ec)) path += "/tokenizer.json";
  Result<std::unique_ptr<text::Tokenizer>> tok = text::Tokenizer::Load(path);
  if (!tok.ok()) {
    std::cerr << "dsv4 tokenize: " << tok.status().message() << "\n";
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  Result<TokenizeStats> stats = TokenizeJsonl(a.input, a.output, **tok);
  if (!stats.ok()) {
    std::cerr << "dsv4 tokenize: " << stats.status().message() << "\n";
    return stats.status().code() == StatusCode::kIoError ? 1 : 2;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "tokenize: " << a.input << " -> " << a.output << ": " << stats->num_texts
            << " texts, " << stats->num_chats << " chats, " << stats->num_tokens << " tokens ("
            << stats->dtype << ") in " << seconds << " s\n";
  return 0;
}

}  // namespace

void RegisterTokenize(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Encode JSONL training documents (texts, conversations) into token ids");
  cmd->add_option("--tokenizer", args->tokenizer, "Directory with tokenizer.json (or the file)")
      ->required();
  cmd->add_option("--input", args->input,
                  "JSONL: {\"text\"} or {\"messages\", \"tools\", "
                  "\"thinking\"} per line")
      ->required();
  AddOutputOption(cmd, &args->output,
                  "Token file (little-endian uint16/uint32; FILE.json describes it)")
      ->required();
  cmd->callback([args, exit_code] { *exit_code = RunTokenize(*args); });
}

}  // namespace dsv4::cli
