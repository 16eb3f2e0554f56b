// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes
// it (docs/text.md "Chat encoding"): separators ", " and ": ", key order as received,
// non-ASCII raw, only '"', '\\' and C0 controls escaped, floats in repr form.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace dsv4::text {

// An ordered JSON value: object keys keep their input order, as Python dicts do.
using OrderedJson = nlohmann::ordered_json;

std::string PyJsonDumps(const OrderedJson& value);
void PyJsonDumpsTo(const OrderedJson& value, std::string& out);

// Python repr() of a float: shortest round-trip digits, exponent form when the
// decimal exponent is < -4 or >= 16, "nan"/"inf" spelled the json.dumps way
// ("NaN", "Infinity", "-Infinity").
std::string PyFloatRepr(double v);

// Appends s as a JSON string literal with Python's escaping (ensure_ascii=False).
void PyJsonQuoteTo(std::string_view s, std::string& out);

}  // namespace dsv4::text
