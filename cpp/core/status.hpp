// Errors are values: the core never throws across its API and never calls exit(), so the same
// code serves the CLI, the tests and the wasm module.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace biaslab {

struct Error {
  std::string path;     // JSON path of the offending value, e.g. "layers[2].num_heads"; "" = whole input
  std::string message;  // one sentence, e.g. "5 does not divide features 64"
  std::string what() const { return path.empty() ? message : path + ": " + message; }
};

template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}
  Result(Error error) : error_(std::move(error)) {}
  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const { return *value_; }
  const T* operator->() const { return &*value_; }
  const Error& error() const { return error_; }

 private:
  std::optional<T> value_;
  Error error_;
};

}  // namespace biaslab
