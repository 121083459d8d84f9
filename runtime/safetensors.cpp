// Safetensors reading (mmap + a header validated in full before any data access),
// sharded models through model.safetensors.index.json, and a small writer.
#include "runtime/safetensors.hpp"

#include "runtime/errors.hpp"

#include <boost/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace troupe::runtime {

// The format is little-endian; reading it by memcpy is only right on a little-endian host.
static_assert(std::endian::native == std::endian::little, "troupe assumes a little-endian host");

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

// The reference implementation refuses headers above 100 MB; a larger one is corrupt,
// and the limit keeps a hostile length from making us parse gigabytes of JSON.
constexpr std::uint64_t max_header_bytes = 100'000'000;

[[noreturn]] void fail(const fs::path& file, const std::string& what) {
  throw model_error(file.string() + ": " + what);
}

std::string errno_text(int error) {
  return std::error_code(error, std::generic_category()).message();
}

// Closes a descriptor on every path out of mapped_file::open.
class fd_guard {
 public:
  explicit fd_guard(int fd) noexcept : fd_(fd) {}
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  ~fd_guard() { ::close(fd_); }
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

// A JSON value that must be a non-negative integer (int64 or uint64 kinds only: a shape
// of 2.5 is corrupt, not something to round).
std::optional<std::uint64_t> as_non_negative(const json::value& v) {
  if (v.is_int64()) {
    if (v.get_int64() < 0)
      return std::nullopt;
    return static_cast<std::uint64_t>(v.get_int64());
  }
  if (v.is_uint64())
    return v.get_uint64();
  return std::nullopt;
}

std::string short_json(const json::value& v) {
  std::string text = json::serialize(v);
  if (text.size() > 60)
    text = text.substr(0, 57) + "...";
  return text;
}

std::string range_text(std::size_t begin, std::size_t end) {
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "[" + std::string.
  std::string text = "[";
  text += std::to_string(begin);
  text += ", ";
  text += std::to_string(end);
  text += "]";
  return text;
}

} // namespace

// --- dtypes -------------------------------------------------------------------

std::size_t dtype_size(weight_dtype dtype) noexcept {
  switch (dtype) {
    case weight_dtype::f32:
      return 4;
    case weight_dtype::f16:
      return 2;
    case weight_dtype::bf16:
      return 2;
    case weight_dtype::f8_e4m3:
      return 1;
    case weight_dtype::i32:
      return 4;
  }
  return 0;
}

bool is_float_dtype(weight_dtype dtype) noexcept {
  return dtype == weight_dtype::f32 || dtype == weight_dtype::f16 || dtype == weight_dtype::bf16;
}

std::string_view dtype_name(weight_dtype dtype) noexcept {
  switch (dtype) {
    case weight_dtype::f32:
      return "F32";
    case weight_dtype::f16:
      return "F16";
    case weight_dtype::bf16:
      return "BF16";
    case weight_dtype::f8_e4m3:
      return "F8_E4M3";
    case weight_dtype::i32:
      return "I32";
  }
  return "?";
}

std::optional<weight_dtype> dtype_from_name(std::string_view name) noexcept {
  if (name == "F32")
    return weight_dtype::f32;
  if (name == "F16")
    return weight_dtype::f16;
  if (name == "BF16")
    return weight_dtype::bf16;
  if (name == "F8_E4M3")
    return weight_dtype::f8_e4m3;
  if (name == "I32")
    return weight_dtype::i32;
  return std::nullopt;
}

// --- mapped_file ----------------------------------------------------------------

mapped_file::mapped_file(void* address, std::size_t size, fs::path path) noexcept
    : address_(address), size_(size), path_(std::move(path)) {}

mapped_file::mapped_file(mapped_file&& other) noexcept
    : address_(std::exchange(other.address_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

mapped_file& mapped_file::operator=(mapped_file&& other) noexcept {
  if (this != &other) {
    unmap();
    address_ = std::exchange(other.address_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

mapped_file::~mapped_file() {
  unmap();
}

void mapped_file::unmap() noexcept {
  if (address_ != nullptr)
    ::munmap(address_, size_);
  address_ = nullptr;
  size_ = 0;
}

std::span<const std::byte> mapped_file::bytes() const noexcept {
  return {static_cast<const std::byte*>(address_), size_};
}

mapped_file mapped_file::open(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail(path, "cannot open (" + errno_text(errno) + ")");
  const fd_guard guard(fd);
  struct stat info {};
  if (::fstat(fd, &info) != 0)
    fail(path, "cannot stat (" + errno_text(errno) + ")");
  if (!S_ISREG(info.st_mode))
    fail(path, "is not a regular file");
  const auto size = static_cast<std::size_t>(info.st_size);
  // mmap refuses a zero length; an empty file is simply an empty mapping.
  if (size == 0)
    return mapped_file(nullptr, 0, path);
  void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (address == MAP_FAILED)
    fail(path, "cannot mmap " + std::to_string(size) + " bytes (" + errno_text(errno) + ")");
  return mapped_file(address, size, path);
}

// --- tensor_view ------------------------------------------------------------------

int64_t tensor_view::element_count() const noexcept {
  int64_t count = 1;
  for (const int64_t d : shape)
    count *= d;
  return count;
}

std::string format_shape(std::span<const int64_t> shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0)
      text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

// --- safetensors_file ----------------------------------------------------------

safetensors_file safetensors_file::open(const fs::path& path) {
  mapped_file file = mapped_file::open(path);
  safetensors_file result = parse(file.bytes(), path);
  result.file_ = std::move(file); // a moved mapping keeps its address: the views stay valid
  return result;
}

safetensors_file safetensors_file::parse(std::span<const std::byte> bytes, const fs::path& path) {
  safetensors_file result;
  result.path_ = path;

  if (bytes.size() < 8)
    fail(path, "file is " + std::to_string(bytes.size()) + " bytes, too small for the 8-byte header length");
  std::uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  if (header_length == 0)
    fail(path, "header length is 0");
  if (header_length > bytes.size() - 8)
    fail(path, "header length " + std::to_string(header_length) + " exceeds file size " + std::to_string(bytes.size()));
  if (header_length > max_header_bytes)
    fail(path, "header length " + std::to_string(header_length) + " exceeds the " + std::to_string(max_header_bytes) +
                   "-byte limit");

  const std::string_view header_text(reinterpret_cast<const char*>(bytes.data() + 8), header_length);
  std::error_code ec;
  const json::value header = json::parse(header_text, ec);
  if (ec)
    fail(path, "header is not valid JSON (" + ec.message() + ")");
  if (!header.is_object())
    fail(path, "header is not a JSON object");

  result.data_ = bytes.subspan(8 + header_length);
  const std::size_t data_size = result.data_.size();

  for (const auto& [key, value] : header.get_object()) {
    const std::string name(key);
    if (name == "__metadata__") {
      if (!value.is_object())
        fail(path, "__metadata__ is not a JSON object");
      // The format defines a string-to-string map; other values are not ours to read.
      for (const auto& [mkey, mvalue] : value.get_object())
        if (mvalue.is_string())
          result.metadata_.emplace(std::string(mkey), std::string(mvalue.get_string()));
      continue;
    }
    const std::string what = "tensor '" + name + "'";
    if (!value.is_object())
      fail(path, what + " is not a JSON object");
    const json::object& info = value.get_object();

    const json::value* dtype_value = info.if_contains("dtype");
    if (dtype_value == nullptr || !dtype_value->is_string())
      fail(path, what + " has no string dtype");
    const std::string_view dtype_text = dtype_value->get_string();
    const std::optional<weight_dtype> dtype = dtype_from_name(dtype_text);
    if (!dtype)
      fail(path, what + " has dtype '" + std::string(dtype_text) +
                     "', which is not supported (supported: F32, F16, BF16, F8_E4M3, I32)");

    const json::value* shape_value = info.if_contains("shape");
    if (shape_value == nullptr || !shape_value->is_array())
      fail(path, what + " has no shape array");
    std::vector<int64_t> shape;
    std::uint64_t elements = 1;
    bool too_large = false;
    for (const json::value& dim : shape_value->get_array()) {
      const std::optional<std::uint64_t> d = as_non_negative(dim);
      if (!d || *d > static_cast<std::uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(path, what + " has shape " + short_json(*shape_value) + ", which is not a list of non-negative integers");
      shape.push_back(static_cast<int64_t>(*d));
      if (__builtin_mul_overflow(elements, *d, &elements))
        too_large = true;
    }
    std::uint64_t needed_bytes = 0;
    if (too_large || __builtin_mul_overflow(elements, static_cast<std::uint64_t>(dtype_size(*dtype)), &needed_bytes))
      fail(path, what + " has shape " + format_shape(shape) + ", too large to address");

    const json::value* offsets_value = info.if_contains("data_offsets");
    std::optional<std::uint64_t> begin, end;
    if (offsets_value != nullptr && offsets_value->is_array() && offsets_value->get_array().size() == 2) {
      begin = as_non_negative(offsets_value->get_array()[0]);
      end = as_non_negative(offsets_value->get_array()[1]);
    }
    if (!begin || !end)
      fail(path, what + " data_offsets " + (offsets_value ? short_json(*offsets_value) : std::string("(missing)")) +
                     " are not [begin, end] non-negative integers");
    if (*begin > *end)
      fail(path, what + " data_offsets " + range_text(*begin, *end) + " are out of order (begin > end)");
    if (*end > data_size)
      fail(path, what + " data_offsets " + range_text(*begin, *end) + " exceed the data section of " +
                     std::to_string(data_size) + " bytes");
    if (*end - *begin != needed_bytes)
      fail(path, what + " data_offsets " + range_text(*begin, *end) + " hold " + std::to_string(*end - *begin) +
                     " bytes, but shape " + format_shape(shape) + " of " + std::string(dtype_name(*dtype)) + " needs " +
                     std::to_string(needed_bytes));

    result.tensors_.insert_or_assign(
        name, entry{*dtype, std::move(shape), static_cast<std::size_t>(*begin), static_cast<std::size_t>(*end)});
  }

  // Two tensors sharing bytes means a corrupt or hand-forged header; empty tensors own
  // no bytes and cannot overlap anything.
  std::vector<std::pair<const std::string*, const entry*>> by_offset;
  for (const auto& [name, e] : result.tensors_)
    if (e.end > e.begin)
      by_offset.emplace_back(&name, &e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const auto& [prev_name, prev] = by_offset[i - 1];
    const auto& [name, e] = by_offset[i];
    if (e->begin < prev->end)
      fail(path, "tensors '" + *prev_name + "' " + range_text(prev->begin, prev->end) + " and '" + *name + "' " +
                     range_text(e->begin, e->end) + " overlap");
  }
  return result;
}

bool safetensors_file::contains(std::string_view name) const {
  return tensors_.find(name) != tensors_.end();
}

tensor_view safetensors_file::get(std::string_view name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end())
    fail(path(), "tensor '" + std::string(name) + "' is missing");
  const entry& e = it->second;
  return tensor_view{it->first, e.dtype, e.shape, data_.subspan(e.begin, e.end - e.begin)};
}

std::vector<std::string> safetensors_file::names() const {
  std::vector<std::string> result;
  result.reserve(tensors_.size());
  for (const auto& [name, e] : tensors_)
    result.push_back(name);
  return result;
}

// --- tensor_store ----------------------------------------------------------------

tensor_store tensor_store::open(const fs::path& model_dir) {
  tensor_store store;
  store.origin_ = model_dir;
  std::error_code ec;

  const auto add_whole_file = [&store](const fs::path& file) {
    store.shards_.push_back(safetensors_file::open(file));
    for (const std::string& name : store.shards_.back().names())
      store.location_.emplace(name, 0);
  };

  if (fs::is_regular_file(model_dir, ec)) {
    add_whole_file(model_dir);
    return store;
  }
  if (!fs::is_directory(model_dir, ec))
    fail(model_dir, "model folder does not exist or is not a directory");

  const fs::path index_path = model_dir / "model.safetensors.index.json";
  const fs::path single_path = model_dir / "model.safetensors";
  // Like transformers: a single model.safetensors wins over an index next to it.
  if (fs::exists(single_path, ec)) {
    add_whole_file(single_path);
    return store;
  }
  if (!fs::exists(index_path, ec))
    fail(model_dir, "has neither model.safetensors nor model.safetensors.index.json");

  // Sharded: the index maps every tensor to a shard file in the same folder.
  const mapped_file index_file = mapped_file::open(index_path);
  const std::span<const std::byte> index_bytes = index_file.bytes();
  const json::value index =
      json::parse(std::string_view(reinterpret_cast<const char*>(index_bytes.data()), index_bytes.size()), ec);
  if (ec)
    fail(index_path, "not valid JSON (" + ec.message() + ")");
  if (!index.is_object())
    fail(index_path, "not a JSON object");
  const json::value* weight_map = index.get_object().if_contains("weight_map");
  if (weight_map == nullptr || !weight_map->is_object())
    fail(index_path, "weight_map is missing or not an object");
  if (weight_map->get_object().empty())
    fail(index_path, "weight_map is empty");

  std::map<std::string, std::size_t> shard_index;          // shard file name -> position in shards_
  std::vector<std::pair<std::string, std::string>> wanted; // tensor, shard file name
  for (const auto& [key, value] : weight_map->get_object()) {
    const std::string tensor(key);
    if (!value.is_string())
      fail(index_path, "weight_map['" + tensor + "'] is not a string");
    const std::string shard(value.get_string());
    // Only plain names in the model folder: an index must not reach files elsewhere.
    if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
        shard.find('\0') != std::string::npos)
      fail(index_path,
           "weight_map['" + tensor + "'] names shard '" + shard + "', which is not a file name in the model folder");
    shard_index.emplace(shard, 0);
    wanted.emplace_back(tensor, shard);
  }
  for (auto& [shard, position] : shard_index) {
    const fs::path shard_path = model_dir / shard;
    if (!fs::exists(shard_path, ec))
      fail(index_path, "names shard '" + shard + "', which does not exist");
    position = store.shards_.size();
    store.shards_.push_back(safetensors_file::open(shard_path));
  }
  for (const auto& [tensor, shard] : wanted) {
    const std::size_t position = shard_index.at(shard);
    if (!store.shards_[position].contains(tensor))
      fail(index_path, "maps tensor '" + tensor + "' to shard '" + shard + "', which does not contain it");
    store.location_.insert_or_assign(tensor, position);
  }
  return store;
}

bool tensor_store::contains(std::string_view name) const {
  return location_.find(name) != location_.end();
}

tensor_view tensor_store::get(std::string_view name) const {
  const auto it = location_.find(name);
  if (it == location_.end())
    fail(origin_, "tensor '" + std::string(name) + "' is missing");
  return shards_[it->second].get(name);
}

const fs::path& tensor_store::file_of(std::string_view name) const {
  const auto it = location_.find(name);
  if (it == location_.end())
    fail(origin_, "tensor '" + std::string(name) + "' is missing");
  return shards_[it->second].path();
}

std::vector<std::string> tensor_store::names() const {
  std::vector<std::string> result;
  result.reserve(location_.size());
  for (const auto& [name, shard] : location_)
    result.push_back(name);
  return result;
}

// --- writer ----------------------------------------------------------------------

void write_safetensors(const fs::path& path, std::span<const tensor_view> tensors,
                       const std::map<std::string, std::string>& metadata) {
  json::object header;
  if (!metadata.empty()) {
    json::object meta;
    for (const auto& [key, value] : metadata)
      meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string_view> seen;
  std::uint64_t offset = 0;
  for (const tensor_view& t : tensors) {
    if (t.name == "__metadata__" || !seen.insert(t.name).second)
      throw std::invalid_argument("write_safetensors: duplicate or reserved tensor name '" + t.name + "'");
    for (const int64_t d : t.shape)
      if (d < 0)
        throw std::invalid_argument("write_safetensors: tensor '" + t.name + "' has a negative dimension");
    const auto needed = static_cast<std::uint64_t>(t.element_count()) * dtype_size(t.dtype);
    if (needed != t.data.size())
      throw std::invalid_argument("write_safetensors: tensor '" + t.name + "' has " + std::to_string(t.data.size()) +
                                  " bytes, shape " + format_shape(t.shape) + " needs " + std::to_string(needed));
    json::array shape;
    for (const int64_t d : t.shape)
      shape.push_back(d);
    header[t.name] = json::object{{"dtype", dtype_name(t.dtype)},
                                  {"shape", std::move(shape)},
                                  {"data_offsets", json::array{offset, offset + needed}}};
    offset += needed;
  }
  std::string header_text = json::serialize(header);
  // Pad with spaces (allowed by the format) so the data section is 8-byte aligned.
  while ((8 + header_text.size()) % 8 != 0)
    header_text.push_back(' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    throw std::runtime_error(path.string() + ": cannot open for writing");
  const std::uint64_t header_length = header_text.size();
  out.write(reinterpret_cast<const char*>(&header_length), 8);
  out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
  for (const tensor_view& t : tensors)
    if (!t.data.empty())
      out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
  out.close();
  if (!out)
    throw std::runtime_error(path.string() + ": write failed");
}

} // namespace troupe::runtime
