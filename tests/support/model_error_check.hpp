// Checks that loading something fails with a runtime::model_error whose
// message names the problem, plus byte-level file helpers for breaking files.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/errors.hpp"

namespace troupe::testing {

template <class F>
std::string model_error_text(F&& f) {
  try {
    f();
  } catch (const runtime::model_error& e) {
    return e.what();
  }
  return "(no model_error was thrown)";
}

inline std::vector<char> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

} // namespace troupe::testing

// expr must throw a model_error whose message contains needle.
#define CHECK_MODEL_ERROR(expr, needle)                                                     \
  do {                                                                                      \
    const std::string message_ = troupe::testing::model_error_text([&] { (void)(expr); }); \
    INFO("message: " << message_);                                                          \
    CHECK(message_.find(needle) != std::string::npos);                                      \
  } while (false)
