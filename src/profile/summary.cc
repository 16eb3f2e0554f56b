#include "profile/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace dsv4::profile {
namespace {

using nlohmann::json;

struct Span {
  double begin = 0, end = 0;
  std::string name;
  double bytes = 0, flops = 0;
  int64_t rows = 0;
};

double NumberArg(const json& e, const char* key) {
  const auto args = e.find("args");
  if (args == e.end() || !args->is_object()) return 0;
  const auto v = args->find(key);
  return v != args->end() && v->is_number() ? v->get<double>() : 0;
}

const std::set<std::string>& Containers() {
  static const std::set<std::string> names = {"model.forward", "model.forward_mtp", "layer",
                                              "attention"};
  return names;
}

}  // namespace

Result<std::vector<ForwardSummary>> SummarizeForwards(const std::string& trace_path,
                                                      int64_t decode_rows_max) {
  std::ifstream in(trace_path);
  if (!in) return IoError("{}: cannot read the trace", trace_path);
  json trace = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (trace.is_discarded() || !trace.is_object() || !trace.contains("traceEvents") ||
      !trace["traceEvents"].is_array()) {
    return DataLoss("{}: not a trace-event JSON file", trace_path);
  }
  // Complete spans of category "kernel", per thread.
  std::map<int64_t, std::vector<Span>> by_tid;
  for (const json& e : trace["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X" || e.value("cat", "") != "kernel") continue;
    Span s;
    s.begin = e.value("ts", 0.0);
    s.end = s.begin + e.value("dur", 0.0);
    s.name = e.value("name", "");
    s.bytes = NumberArg(e, "bytes");
    s.flops = NumberArg(e, "flops");
    s.rows = static_cast<int64_t>(NumberArg(e, "rows"));
    by_tid[e.value("tid", int64_t{0})].push_back(std::move(s));
  }
  ForwardSummary phases[2];
  phases[0].label = "prefill";
  phases[1].label = "decode";
  std::map<std::string, OpStats> ops[2];
  for (auto& [tid, spans] : by_tid) {
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.begin < b.begin; });
    // Each forward, then the leaf spans that start inside it.
    for (size_t i = 0; i < spans.size(); ++i) {
      if (spans[i].name != "model.forward") continue;
      const Span& f = spans[i];
      const int p = f.rows > decode_rows_max ? 0 : 1;
      ++phases[p].forwards;
      phases[p].rows += f.rows;
      phases[p].us += f.end - f.begin;
      for (size_t j = i + 1; j < spans.size() && spans[j].begin < f.end; ++j) {
        const Span& s = spans[j];
        if (Containers().count(s.name) != 0) continue;
        OpStats& o = ops[p][s.name];
        o.name = s.name;
        ++o.calls;
        o.us += s.end - s.begin;
        o.bytes += s.bytes;
        o.flops += s.flops;
      }
    }
  }
  std::vector<ForwardSummary> out;
  for (int p = 0; p < 2; ++p) {
    if (phases[p].forwards == 0) continue;
    double attributed = 0;
    for (auto& [name, o] : ops[p]) {
      attributed += o.us;
      phases[p].ops.push_back(o);
    }
    std::sort(phases[p].ops.begin(), phases[p].ops.end(),
              [](const OpStats& a, const OpStats& b) { return a.us > b.us; });
    OpStats other;
    other.name = "(other)";
    other.us = std::max(0.0, phases[p].us - attributed);
    phases[p].ops.push_back(other);
    out.push_back(std::move(phases[p]));
  }
  return out;
}

std::string FormatOpTable(const ForwardSummary& s) {
  std::string t = fmt::format(
      "{}: {} forwards, {} rows, {:.3f} ms per forward\n"
      "  {:<16} {:>8} {:>12} {:>7} {:>9} {:>10}\n",
      s.label, s.forwards, s.rows,
      s.us / 1e3 / static_cast<double>(std::max<int64_t>(1, s.forwards)), "op", "calls",
      "ms/forward", "share", "GB/s", "GFLOP/s");
  const double n = static_cast<double>(std::max<int64_t>(1, s.forwards));
  for (const OpStats& o : s.ops) {
    const double sec = o.us * 1e-6;
    const std::string gbs =
        o.bytes > 0 && sec > 0 ? fmt::format("{:.2f}", o.bytes / sec / 1e9) : "-";
    const std::string gfs =
        o.flops > 0 && sec > 0 ? fmt::format("{:.2f}", o.flops / sec / 1e9) : "-";
    t += fmt::format("  {:<16} {:>8} {:>12.3f} {:>6.1f}% {:>9} {:>10}\n", o.name, o.calls,
                     o.us / 1e3 / n, s.us > 0 ? 100.0 * o.us / s.us : 0.0, gbs, gfs);
  }
  return t;
}

}  // namespace dsv4::profile
