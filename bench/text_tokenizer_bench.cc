// Tokenizer encode throughput, single thread, on a text file split into
// documents (the side-by-side partner is bench/tokenizer_compare/hf_bench.js,
// which runs the Hugging Face Rust engine on the same files).
//
//   text_tokenizer_bench TOKENIZER_JSON CORPUS [--overlay F] [--ids-out F] [--repeat N]
//
// The corpus is split at form feeds (\f) into documents, encoded one by one
// (like prompts); --ids-out writes all ids as little-endian int32 so the two
// engines' outputs can be compared byte for byte.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace {

// CPU time of this thread: robust to preemption on a shared machine, which
// wall time is not (the comparison partner reports process CPU time).
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s TOKENIZER_JSON CORPUS [--overlay F] [--ids-out F] [--repeat N]\n",
                 argv[0]);
    return 2;
  }
  std::string overlay, ids_out;
  int repeat = 3;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--overlay") overlay = argv[i + 1];
    if (flag == "--ids-out") ids_out = argv[i + 1];
    if (flag == "--repeat") repeat = std::stoi(argv[i + 1]);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = dsv4::text::Tokenizer::Load(argv[1], overlay);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string corpus = ReadAll(argv[2]);
  std::vector<std::string_view> docs;
  for (size_t pos = 0; pos <= corpus.size();) {
    size_t end = corpus.find('\f', pos);
    if (end == std::string::npos) end = corpus.size();
    docs.push_back(std::string_view(corpus).substr(pos, end - pos));
    pos = end + 1;
  }
  std::vector<int32_t> all;
  double best = 1e30, best_cpu = 1e30;
  size_t num_ids = 0;
  for (int r = 0; r < repeat; ++r) {
    all.clear();
    // Fresh tokenizer state each run would hide the cache; HF keeps its
    // cache across calls too, so both engines are measured warm after run 0.
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = ThreadCpuSeconds();
    for (std::string_view d : docs) {
      const auto ids = (*tok)->Encode(d);
      all.insert(all.end(), ids.begin(), ids.end());
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu = ThreadCpuSeconds() - cpu_start;
    best = std::min(best, s);
    best_cpu = std::min(best_cpu, cpu);
    num_ids = all.size();
    std::printf("dsv4 run %d: wall %.3f s (%.2f MB/s), cpu %.3f s (%.2f MB/s)\n", r, s,
                corpus.size() / s / 1e6, cpu, corpus.size() / cpu / 1e6);
  }
  std::printf(
      "dsv4: load %.2f s; %zu bytes, %zu docs, %zu ids; best wall %.2f MB/s, best cpu %.2f MB/s\n",
      load_s, corpus.size(), docs.size(), num_ids, corpus.size() / best / 1e6,
      corpus.size() / best_cpu / 1e6);
  if (!ids_out.empty()) {
    std::ofstream f(ids_out, std::ios::binary);
    f.write(reinterpret_cast<const char*>(all.data()),
            static_cast<std::streamsize>(all.size() * 4));
  }
  return 0;
}
