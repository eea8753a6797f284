// Errors as values. Every boundary that reads untrusted input (files, HTTP bodies, stored
// caches) returns a Status or Result<T> carrying a code and a message with context; assert is
// only for internal invariants. Thread-safe: values, no shared state.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvmem {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // caller passed something malformed
  kNotFound,         // a named thing (file, key, tensor, agent) does not exist
  kIo,               // the OS said no (open, read, mmap, fsync)
  kCorrupt,          // data exists but violates its format (truncated, out of bounds, bad magic)
  kUnsupported,      // valid but not implemented here (unknown tensor type, architecture)
  kOutOfRange,       // a value past a limit (context length, vocab)
  kResourceExhausted,  // a bounded resource is full (KV pool, queue, memory budget)
  kFailedPrecondition, // the request is valid but the state does not allow it now
  kUnauthenticated,    // missing or wrong credentials
  kUnavailable,        // temporarily unable (overloaded, shutting down); retry later
  kInternal,
};

const char* ErrorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "Corrupt: tensor 'blk.0.attn_q.weight': data past end of file"
  std::string ToString() const;
  // Prepends context: "while loading X: <message>".
  Status WithContext(std::string_view context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status IoError(std::string m) { return {ErrorCode::kIo, std::move(m)}; }
inline Status Corrupt(std::string m) { return {ErrorCode::kCorrupt, std::move(m)}; }
inline Status Unsupported(std::string m) { return {ErrorCode::kUnsupported, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {ErrorCode::kOutOfRange, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {ErrorCode::kResourceExhausted, std::move(m)};
}
inline Status FailedPrecondition(std::string m) {
  return {ErrorCode::kFailedPrecondition, std::move(m)};
}
inline Status Unauthenticated(std::string m) { return {ErrorCode::kUnauthenticated, std::move(m)}; }
inline Status Unavailable(std::string m) { return {ErrorCode::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvmem

#define KVMEM_CONCAT_INNER(a, b) a##b
#define KVMEM_CONCAT(a, b) KVMEM_CONCAT_INNER(a, b)

#define KVMEM_RETURN_IF_ERROR(expr)               \
  do {                                            \
    ::kvmem::Status kvmem_status_ = (expr);       \
    if (!kvmem_status_.ok()) return kvmem_status_; \
  } while (0)

#define KVMEM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

// KVMEM_ASSIGN_OR_RETURN(auto x, Foo());
#define KVMEM_ASSIGN_OR_RETURN(lhs, expr) \
  KVMEM_ASSIGN_OR_RETURN_IMPL(KVMEM_CONCAT(kvmem_result_, __LINE__), lhs, expr)
