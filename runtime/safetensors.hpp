// Safetensors files: mapped read-only, with the whole header validated before a tensor
// byte is read; a model's shards (model.safetensors.index.json); a small writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::runtime {

// The tensor element types troupe reads. Everything else (F64, I8, other FP8s) is
// rejected when a file is opened, so later code never meets an unknown type. F8_E4M3
// (e4m3fn) and I32 appear only in quantized checkpoints (runtime/quantized_linear.hpp).
enum class weight_dtype { f32, f16, bf16, f8_e4m3, i32 };

std::size_t dtype_size(weight_dtype dtype) noexcept;
// F32, F16 and BF16: the dtypes a plain (unquantized) tensor may have.
bool is_float_dtype(weight_dtype dtype) noexcept;
// The safetensors spelling: "F32", "F16", "BF16", "F8_E4M3", "I32".
std::string_view dtype_name(weight_dtype dtype) noexcept;
std::optional<weight_dtype> dtype_from_name(std::string_view name) noexcept;

// A whole file mapped read-only. Move-only; unmaps on destruction. The descriptor is
// closed right after mmap: the mapping keeps the pages reachable by itself.
class mapped_file {
 public:
  // Throws model_error naming the path (missing, not a regular file, mmap failure).
  static mapped_file open(const std::filesystem::path& path);

  mapped_file() = default;
  mapped_file(mapped_file&& other) noexcept;
  mapped_file& operator=(mapped_file&& other) noexcept;
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file();

  std::span<const std::byte> bytes() const noexcept;
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  mapped_file(void* address, std::size_t size, std::filesystem::path path) noexcept;
  void unmap() noexcept;

  void* address_ = nullptr;
  std::size_t size_ = 0;
  std::filesystem::path path_;
};

// One tensor's description and raw little-endian bytes. The span points into a
// mapping: it stays valid while the safetensors_file / tensor_store that gave it lives.
struct tensor_view {
  std::string name;
  weight_dtype dtype = weight_dtype::f32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;

  int64_t element_count() const noexcept;
};

// "[172, 64]", the form error messages use.
std::string format_shape(std::span<const int64_t> shape);

class safetensors_file {
 public:
  // Maps the file and validates the header: length inside the file, JSON object,
  // known dtypes, data_offsets ordered, inside the data section, not overlapping, and
  // sized exactly product(shape) * dtype size. Throws model_error naming the file.
  static safetensors_file open(const std::filesystem::path& path);
  // The same checks on a whole file's bytes already in memory (open() maps the file and
  // calls this; tests/fuzz feeds it directly). `path` only names the file in messages.
  // The result's tensor views point into `bytes`, which must outlive it.
  static safetensors_file parse(std::span<const std::byte> bytes, const std::filesystem::path& path);

  safetensors_file() = default;
  safetensors_file(safetensors_file&&) noexcept = default;
  safetensors_file& operator=(safetensors_file&&) noexcept = default;
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  bool contains(std::string_view name) const;
  // Throws model_error naming the tensor and the file when it is not there.
  tensor_view get(std::string_view name) const;
  std::vector<std::string> names() const; // sorted
  std::size_t tensor_count() const noexcept { return tensors_.size(); }
  // The optional "__metadata__" string map (e.g. {"format": "pt"}).
  const std::map<std::string, std::string, std::less<>>& metadata() const noexcept { return metadata_; }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  struct entry {
    weight_dtype dtype;
    std::vector<int64_t> shape;
    std::size_t begin; // byte offsets inside the data section
    std::size_t end;
  };

  mapped_file file_; // empty when parse() was given the bytes
  std::filesystem::path path_;
  std::span<const std::byte> data_; // the data section, after the header
  std::map<std::string, entry, std::less<>> tensors_;
  std::map<std::string, std::string, std::less<>> metadata_;
};

// All tensors of one model, across its shards. Move-only (it owns the mappings).
class tensor_store {
 public:
  // model_dir/model.safetensors, else model_dir/model.safetensors.index.json and the
  // shards it names (the order transformers uses). A path to one .safetensors file
  // also works. Throws model_error naming the folder, index or shard at fault.
  static tensor_store open(const std::filesystem::path& model_dir);

  tensor_store() = default;
  tensor_store(tensor_store&&) noexcept = default;
  tensor_store& operator=(tensor_store&&) noexcept = default;
  tensor_store(const tensor_store&) = delete;
  tensor_store& operator=(const tensor_store&) = delete;

  bool contains(std::string_view name) const;
  // Throws model_error naming the tensor if it is missing.
  tensor_view get(std::string_view name) const;
  // The shard file holding the tensor, for error messages; throws like get().
  const std::filesystem::path& file_of(std::string_view name) const;
  std::vector<std::string> names() const; // sorted
  std::size_t tensor_count() const noexcept { return location_.size(); }
  std::size_t shard_count() const noexcept { return shards_.size(); }

 private:
  std::filesystem::path origin_; // what open() was given, for messages
  std::vector<safetensors_file> shards_;
  std::map<std::string, std::size_t, std::less<>> location_; // tensor name -> shard index
};

// Writes a safetensors file: tensors in the given order, header padded with spaces so
// the data section starts 8-byte aligned. For tests and converters, not the hot path.
// Throws std::invalid_argument on inconsistent input (size vs shape, duplicate names)
// and std::runtime_error naming the path when writing fails.
void write_safetensors(const std::filesystem::path& path, std::span<const tensor_view> tensors,
                       const std::map<std::string, std::string>& metadata = {});

} // namespace troupe::runtime
