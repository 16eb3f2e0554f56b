#include "text/py_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace dsv4::text {

std::string PyFloatRepr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form: d[.ddd]e±X.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  const size_t e = sci.find('e');
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string digits = sci.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out += "0." + std::string(-exp - 1, '0') + digits;
  } else if (static_cast<int>(digits.size()) <= exp + 1) {
    out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
  }
  return out;
}

void PyJsonQuoteTo(std::string_view s, std::string& out) {
  static const char kHex[] = "0123456789abcdef";
  out += '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (u < 0x20) {
          out += "\\u00";
          out += kHex[u >> 4];
          out += kHex[u & 15];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

namespace {

void DumpScalar(const OrderedJson& v, std::string& out) {
  switch (v.type()) {
    case OrderedJson::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      break;
    case OrderedJson::value_t::number_integer:
      out += std::to_string(v.get<int64_t>());
      break;
    case OrderedJson::value_t::number_unsigned:
      out += std::to_string(v.get<uint64_t>());
      break;
    case OrderedJson::value_t::number_float:
      out += PyFloatRepr(v.get<double>());
      break;
    case OrderedJson::value_t::string:
      PyJsonQuoteTo(v.get_ref<const std::string&>(), out);
      break;
    default:  // null; binary and discarded have no JSON text either
      out += "null";
      break;
  }
}

}  // namespace

// Iterative, with an explicit stack of open containers: the value may come
// from a client and be nested as deep as its text allows (a recursive walk
// overflowed the stack at ~21,500 levels).
void PyJsonDumpsTo(const OrderedJson& root, std::string& out) {
  struct Open {
    const OrderedJson* container;
    OrderedJson::const_iterator next;
  };
  std::vector<Open> stack;
  const OrderedJson* value = &root;
  for (;;) {
    if (value != nullptr) {
      if (value->is_array() || value->is_object()) {
        out += value->is_array() ? '[' : '{';
        stack.push_back(Open{value, value->cbegin()});
      } else {
        DumpScalar(*value, out);
      }
      value = nullptr;
    }
    if (stack.empty()) break;
    Open& top = stack.back();
    if (top.next == top.container->cend()) {
      out += top.container->is_array() ? ']' : '}';
      stack.pop_back();
      continue;
    }
    if (top.next != top.container->cbegin()) out += ", ";
    if (top.container->is_object()) {
      PyJsonQuoteTo(top.next.key(), out);
      out += ": ";
    }
    value = &*top.next;
    ++top.next;
  }
}

std::string PyJsonDumps(const OrderedJson& value) {
  std::string out;
  PyJsonDumpsTo(value, out);
  return out;
}

}  // namespace dsv4::text
