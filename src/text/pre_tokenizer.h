// The HF pre-tokenizer: a sequence of Split steps (behaviour "Isolated").
//
// Each step applies its regex to every piece produced by the previous step,
// separately (a lookahead at a piece's end sees the end of the subject, as in
// HF).  Every match and every gap between matches becomes a piece.  Invalid
// UTF-8 never matches, so stray bytes land in gap pieces and are encoded
// byte by byte (lossless).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "text/regex.h"

namespace dsv4::text {

class RegexSplitter {
 public:
  static Result<std::unique_ptr<RegexSplitter>> Create(const std::vector<std::string>& patterns);

  // Calls emit(piece) for every final piece of `text`, in order; the pieces
  // concatenate to `text`.  Thread-safe.
  template <typename Emit>
  void Split(std::string_view text, Emit&& emit) const;

 private:
  RegexSplitter() = default;

  template <typename Emit>
  void SplitStep(size_t step, std::vector<std::unique_ptr<Regex::MatchData>>& mds,
                 std::string_view piece, Emit& emit) const;

  std::vector<std::unique_ptr<Regex>> steps_;
};

template <typename Emit>
void RegexSplitter::Split(std::string_view text, Emit&& emit) const {
  if (text.empty()) return;
  if (steps_.empty()) {
    emit(text);
    return;
  }
  std::vector<std::unique_ptr<Regex::MatchData>> mds;
  mds.reserve(steps_.size());
  for (const auto& re : steps_) mds.push_back(std::make_unique<Regex::MatchData>(*re));
  SplitStep(0, mds, text, emit);
}

template <typename Emit>
void RegexSplitter::SplitStep(size_t step, std::vector<std::unique_ptr<Regex::MatchData>>& mds,
                              std::string_view piece, Emit& emit) const {
  auto forward = [&](std::string_view p) {
    if (step + 1 == steps_.size()) {
      emit(p);
    } else {
      SplitStep(step + 1, mds, p, emit);
    }
  };
  size_t pos = 0;
  size_t begin = 0, end = 0;
  while (pos < piece.size() && steps_[step]->Find(piece, pos, *mds[step], &begin, &end) &&
         end > begin) {  // the patterns never match empty; stop rather than loop if one did
    if (begin > pos) forward(piece.substr(pos, begin - pos));
    forward(piece.substr(begin, end - begin));
    pos = end;
  }
  if (pos < piece.size()) forward(piece.substr(pos));
}

}  // namespace dsv4::text
