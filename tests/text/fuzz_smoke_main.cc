// A libFuzzer-free driver for the text fuzz harnesses, so every build (and CI,
// which builds with gcc) runs a short deterministic smoke of each target: the
// seed corpus, then mutations of it (byte flips, inserts, deletes, splices)
// from a fixed-seed generator, for a bounded number of inputs and seconds.
//
//   <target>_smoke SEED_DIR [NUM_MUTATIONS] [MAX_SECONDS]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::string Mutate(const std::vector<std::string>& seeds, std::mt19937& rng) {
  std::string s = seeds[rng() % seeds.size()];
  const int num_edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < num_edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % s.size();
    switch (rng() % 5) {
      case 0:
        if (!s.empty()) s[pos] = static_cast<char>(rng());
        break;
      case 1:
        s.insert(pos, 1, static_cast<char>(rng()));
        break;
      case 2:
        if (!s.empty()) s.erase(pos, 1 + rng() % 8);
        break;
      case 3: {  // splice a piece of another seed
        const std::string& o = seeds[rng() % seeds.size()];
        if (!o.empty()) {
          const size_t from = rng() % o.size();
          s.insert(pos, o.substr(from, 1 + rng() % 32));
        }
        break;
      }
      default:
        if (!s.empty()) s.resize(pos);  // truncate
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR [NUM_MUTATIONS] [MAX_SECONDS]\n", argv[0]);
    return 2;
  }
  const int num_mutations = argc > 2 ? std::stoi(argv[2]) : 3000;
  const double max_seconds = argc > 3 ? std::stod(argv[3]) : 10.0;
  std::vector<std::string> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(argv[1])) {
    std::ifstream f(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    seeds.push_back(ss.str());
  }
  if (seeds.empty()) seeds.push_back("");
  auto run = [](const std::string& s) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  for (const auto& s : seeds) run(s);
  std::mt19937 rng(20261129);
  const auto start = std::chrono::steady_clock::now();
  int n = 0;
  for (; n < num_mutations; ++n) {
    run(Mutate(seeds, rng));
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
        max_seconds)
      break;
  }
  std::printf("%zu seeds + %d mutations: no property violated\n", seeds.size(), n);
  return 0;
}
