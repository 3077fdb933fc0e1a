// Typed rows of the configuration table (accl/config.h), for the libraries of
// the SDK. A row is one `Var<T>` defined at namespace scope: its constructor
// registers the row (name, kind, default, doc text) with libaccl when the
// library loads, and get() parses the environment once. A `Kind<T>` is the
// parser and the printer of a type of value; the accepted text it carries
// goes into the docs and into every error.
//
//   const config::Var<int> kStreams("ACCL_SOCKET_NSTREAMS", "accl backend",
//       config::intRange(1, 16), 2, nullptr, "TCP connections per pair of ranks ...");
//   int n = kStreams.get();  // throws InvalidArgument for ACCL_SOCKET_NSTREAMS=0
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "accl/config.h"

namespace accl {
namespace config {

using Getenv = std::function<const char*(const char*)>;

// How the text of a variable becomes a T, and a T becomes text.
template <typename T>
struct Kind {
  std::string type;      // "int", "duration", "enum", "string", "path", "list"
  std::string accepted;  // in words: for the docs and the errors
  std::function<bool(const std::string& text, T* out)> parse;  // false: not accepted
  std::function<std::string(const T&)> print;
};

// An integer in lo..hi; `note` is added to the accepted text ("0: always copy").
Kind<int> intRange(long lo, long hi, const std::string& note = "");
// A positive duration with an optional unit (ms, s, m, h); seconds by default.
// With `zeroMeans` ("off"), 0 is accepted too and means that.
Kind<std::chrono::milliseconds> duration(const char* zeroMeans = nullptr);
// Any non-empty text; `type` is "string" or "path".
Kind<std::string> text(const std::string& accepted, const std::string& type = "string");
// One of `values`, in any case; the value is the canonical (listed) spelling.
Kind<std::string> oneOf(const std::vector<std::string>& values);
// A comma-separated subset of `values` (any case, duplicates dropped, in the
// order given); `aliases` map other spellings onto values.
Kind<std::vector<std::string>> subsetOf(const std::vector<std::string>& values,
                                        const std::vector<std::pair<std::string, std::string>>& aliases = {});

// Throws InvalidArgument "accl: invalid value 'V' for NAME; accepted: A".
[[noreturn]] void invalid(const std::string& name, const std::string& value, const std::string& accepted);

// A row as libaccl keeps it: the documented entry and how to print the
// effective value of an environment (parses it; throws InvalidArgument).
struct Row {
  ConfigEntry entry;
  std::function<std::string(const Getenv&)> valueText;
};
// Adds a row to the table (a second row of the same name is ignored).
void registerRow(Row row);
// The process environment's lookup.
const char* processEnv(const char* name);

template <typename T>
class Var {
 public:
  // `defaultDoc`: how the docs show the default (nullptr: the printed
  // default), for defaults that depend on the host ("(auto: ...)").
  Var(const char* name, const char* owner, Kind<T> kind, T def, const char* defaultDoc, const char* meaning)
      : name_(name), kind_(std::move(kind)), def_(std::move(def)) {
    Row r;
    r.entry = {name, kind_.type, defaultDoc ? defaultDoc : kind_.print(def_), kind_.accepted, meaning, owner};
    r.valueText = [this](const Getenv& env) { return kind_.print(parse(env)); };
    registerRow(std::move(r));
  }
  Var(const Var&) = delete;
  Var& operator=(const Var&) = delete;

  const char* name() const { return name_; }

  // The value in `env`: the default when unset or empty.
  T parse(const Getenv& env) const {
    const char* v = env(name_);
    if (!v || !*v) return def_;
    T out;
    if (!kind_.parse(v, &out)) invalid(name_, v, kind_.accepted);
    return out;
  }

  // The value in the process environment, parsed once; an invalid value
  // throws the same InvalidArgument on every call.
  const T& get() const {
    std::call_once(once_, [this] {
      try {
        value_ = parse(processEnv);
      } catch (...) {
        error_ = std::current_exception();
      }
    });
    if (error_) std::rethrow_exception(error_);
    return value_;
  }

 private:
  const char* name_;
  Kind<T> kind_;
  T def_;
  mutable std::once_flag once_;
  mutable T value_{};
  mutable std::exception_ptr error_;
};

}  // namespace config
}  // namespace accl
