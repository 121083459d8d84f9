// safetensors_file / tensor_store / write_safetensors: the real stories260k file, a
// writer round trip, shards, and corrupt files that must fail cleanly (never crash).
#include "runtime/safetensors.hpp"
#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include "tests/support/data_root.hpp"
#include "tests/support/model_error_check.hpp"
#include "tests/support/temp_dir.hpp"

#include <boost/json.hpp>

#include <stdlib.h>

#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace troupe::runtime;
using namespace troupe::testing;

// A file with the given header text and data bytes; header_length overrides the
// length field when given (to forge a lie).
void write_raw(const fs::path& path, const std::string& header, std::size_t data_bytes,
               std::optional<uint64_t> header_length = std::nullopt) {
  std::vector<char> bytes(8);
  const uint64_t length = header_length.value_or(header.size());
  std::memcpy(bytes.data(), &length, 8);
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.resize(bytes.size() + data_bytes, '\x11');
  write_bytes(path, bytes);
}

std::span<const std::byte> as_bytes_of(const std::vector<float>& v) {
  return std::as_bytes(std::span(v));
}

} // namespace

TEST_CASE("the stories260k file opens with 48 tensors and its metadata") {
  const safetensors_file file = safetensors_file::open(stories_dir() / "model.safetensors");
  CHECK(file.tensor_count() == 48);
  CHECK(file.names().size() == 48);
  CHECK(file.metadata().at("format") == "pt");
  CHECK_FALSE(file.contains("__metadata__"));

  const tensor_view q = file.get("model.layers.0.self_attn.q_proj.weight");
  CHECK(q.dtype == weight_dtype::f32);
  CHECK(q.shape == std::vector<int64_t>{64, 64});
  CHECK(q.data.size() == 64 * 64 * 4);
  CHECK(q.element_count() == 4096);

  const tensor_view k = file.get("model.layers.4.self_attn.k_proj.weight");
  CHECK(k.shape == std::vector<int64_t>{32, 64});
  const tensor_view down = file.get("model.layers.2.mlp.down_proj.weight");
  CHECK(down.shape == std::vector<int64_t>{64, 172});

  // model.norm.weight[0] as read independently with python's struct module: 0x401d54ef.
  const tensor_view norm = file.get("model.norm.weight");
  uint32_t bits = 0;
  std::memcpy(&bits, norm.data.data(), 4);
  CHECK(bits == 0x401d54efu);

  CHECK_MODEL_ERROR(file.get("model.layers.9.mlp.up_proj.weight"),
                    "tensor 'model.layers.9.mlp.up_proj.weight' is missing");
}

TEST_CASE("mapped_file is move-only and keeps its bytes across moves") {
  mapped_file a = mapped_file::open(stories_dir() / "config.json");
  const std::byte* address = a.bytes().data();
  const std::size_t size = a.bytes().size();
  mapped_file b = std::move(a);
  CHECK(b.bytes().data() == address);
  CHECK(b.bytes().size() == size);
  CHECK(a.bytes().empty()); // NOLINT(bugprone-use-after-move): moved-from state is specified
  mapped_file c;
  c = std::move(b);
  CHECK(c.bytes().data() == address);
  static_assert(!std::is_copy_constructible_v<mapped_file>);
  static_assert(!std::is_copy_constructible_v<safetensors_file>);
  static_assert(!std::is_copy_constructible_v<tensor_store>);
}

TEST_CASE("write_safetensors round trip, including scalars, empty tensors and metadata") {
  temp_dir dir{"troupe_safetensors"};
  const std::vector<float> matrix{1.0f, -2.0f, 3.5f, 0.25f, 1e-30f, -0.0f};
  const std::vector<float> scalar{42.0f};
  const std::vector<uint16_t> halves{0x3c00, 0xc000, 0x7bff};
  const std::vector<tensor_view> tensors{
      {"b.matrix", weight_dtype::f32, {2, 3}, as_bytes_of(matrix)},
      {"a.scalar", weight_dtype::f32, {}, as_bytes_of(scalar)},
      {"c.empty", weight_dtype::bf16, {0, 5}, {}},
      {"d.half", weight_dtype::f16, {3}, std::as_bytes(std::span(halves))},
  };
  const fs::path path = dir.path / "x.safetensors";
  write_safetensors(path, tensors, {{"format", "pt"}, {"note", "troupe test"}});

  // The data section starts 8-byte aligned.
  const std::vector<char> bytes = read_bytes(path);
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  CHECK((8 + header_length) % 8 == 0);

  const safetensors_file file = safetensors_file::open(path);
  CHECK(file.tensor_count() == 4);
  CHECK(file.names() == std::vector<std::string>{"a.scalar", "b.matrix", "c.empty", "d.half"});
  CHECK(file.metadata().at("note") == "troupe test");
  for (const tensor_view& expected : tensors) {
    const tensor_view got = file.get(expected.name);
    CHECK(got.dtype == expected.dtype);
    CHECK(got.shape == expected.shape);
    REQUIRE(got.data.size() == expected.data.size());
    if (!got.data.empty())
      CHECK(std::memcmp(got.data.data(), expected.data.data(), got.data.size()) == 0);
  }
  CHECK(file.get("a.scalar").element_count() == 1);
  CHECK(file.get("c.empty").element_count() == 0);

  // The writer refuses inconsistent input.
  const std::vector<tensor_view> wrong_size{{"x", weight_dtype::f32, {4}, as_bytes_of(matrix)}};
  CHECK_THROWS_AS(write_safetensors(dir.path / "y.safetensors", wrong_size), std::invalid_argument);
  const std::vector<tensor_view> duplicate{{"x", weight_dtype::f32, {1}, as_bytes_of(scalar)},
                                           {"x", weight_dtype::f32, {1}, as_bytes_of(scalar)}};
  CHECK_THROWS_AS(write_safetensors(dir.path / "y.safetensors", duplicate), std::invalid_argument);
}

TEST_CASE("F8_E4M3 and I32 tensors (quantized checkpoints) are read with their sizes checked") {
  temp_dir dir{"troupe_safetensors"};
  const fs::path p = dir.path / "q.safetensors";
  const std::byte codes[3] = {std::byte{0x38}, std::byte{0x7e}, std::byte{0xff}};
  const int32_t words[2] = {0x12345678, -1};
  const std::vector<tensor_view> tensors = {
      {"w", weight_dtype::f8_e4m3, {3}, std::span<const std::byte>(codes, 3)},
      {"q", weight_dtype::i32, {1, 2}, std::as_bytes(std::span<const int32_t>(words, 2))}};
  write_safetensors(p, tensors);
  const safetensors_file file = safetensors_file::open(p);
  CHECK(file.get("w").dtype == weight_dtype::f8_e4m3);
  CHECK(file.get("w").data.size() == 3);
  CHECK(file.get("w").data[1] == std::byte{0x7e});
  CHECK(file.get("q").dtype == weight_dtype::i32);
  CHECK(file.get("q").shape == std::vector<int64_t>{1, 2});
  int32_t got[2];
  std::memcpy(got, file.get("q").data.data(), 8);
  CHECK(got[0] == 0x12345678);
  CHECK(got[1] == -1);
  CHECK(dtype_name(weight_dtype::f8_e4m3) == "F8_E4M3");
  CHECK(dtype_from_name("I32") == weight_dtype::i32);
  CHECK(dtype_size(weight_dtype::f8_e4m3) == 1);
  CHECK(dtype_size(weight_dtype::i32) == 4);
  CHECK_FALSE(is_float_dtype(weight_dtype::i32));
  // Sizes are checked per dtype: 3 bytes are not one I32.
  write_raw(p, R"({"t":{"dtype":"I32","shape":[1],"data_offsets":[0,3]}})", 3);
  CHECK_MODEL_ERROR(safetensors_file::open(p), "hold 3 bytes, but shape [1] of I32 needs 4");
  write_raw(p, R"({"t":{"dtype":"F8_E5M2","shape":[1],"data_offsets":[0,1]}})", 1);
  CHECK_MODEL_ERROR(safetensors_file::open(p), "has dtype 'F8_E5M2', which is not supported");
}

TEST_CASE("unaligned data sections are read correctly") {
  // A hand-written header whose length is not a multiple of 8 leaves the floats unaligned.
  temp_dir dir{"troupe_safetensors"};
  const std::string header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  REQUIRE((8 + header.size()) % 4 != 0);
  std::vector<char> bytes(8);
  const uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);
  bytes.insert(bytes.end(), header.begin(), header.end());
  const float values[2] = {1.5f, -7.25f};
  const char* raw = reinterpret_cast<const char*>(values);
  bytes.insert(bytes.end(), raw, raw + 8);
  write_bytes(dir.path / "u.safetensors", bytes);

  const safetensors_file file = safetensors_file::open(dir.path / "u.safetensors");
  float got[2];
  std::memcpy(got, file.get("t").data.data(), 8);
  CHECK(got[0] == 1.5f);
  CHECK(got[1] == -7.25f);
}

TEST_CASE("corrupt headers are clear model_errors") {
  temp_dir dir{"troupe_safetensors"};
  const fs::path p = dir.path / "bad.safetensors";
  const auto open = [&] { return safetensors_file::open(p); };

  SUBCASE("missing file") {
    CHECK_MODEL_ERROR(safetensors_file::open(dir.path / "nope.safetensors"), "nope.safetensors: cannot open");
  }
  SUBCASE("a directory") {
    CHECK_MODEL_ERROR(safetensors_file::open(dir.path), "not a regular file");
  }
  SUBCASE("empty file") {
    write_bytes(p, {});
    CHECK_MODEL_ERROR(open(), "file is 0 bytes, too small");
  }
  SUBCASE("shorter than the length field") {
    write_bytes(p, {'\x10', '\0', '\0'});
    CHECK_MODEL_ERROR(open(), "file is 3 bytes, too small for the 8-byte header length");
  }
  SUBCASE("header length 1e12") {
    write_raw(p, "{}", 0, 1'000'000'000'000ull);
    CHECK_MODEL_ERROR(open(), "bad.safetensors: header length 1000000000000 exceeds file size 10");
  }
  SUBCASE("header length one past the end") {
    write_raw(p, "{}", 0, 3);
    CHECK_MODEL_ERROR(open(), "header length 3 exceeds file size 10");
  }
  SUBCASE("header length 0") {
    write_raw(p, "", 4);
    CHECK_MODEL_ERROR(open(), "header length is 0");
  }
  SUBCASE("header length above the 100 MB limit, inside a sparse big file") {
    {
      std::ofstream out(p, std::ios::binary);
      const uint64_t length = 200'000'000;
      out.write(reinterpret_cast<const char*>(&length), 8);
    }
    fs::resize_file(p, 200'000'100);
    CHECK_MODEL_ERROR(open(), "exceeds the 100000000-byte limit");
  }
  SUBCASE("header not JSON") {
    write_raw(p, "{\"a\": [1, 2", 0);
    CHECK_MODEL_ERROR(open(), "header is not valid JSON");
  }
  SUBCASE("header of binary garbage") {
    write_raw(p, std::string("\xff\xfe\x00\x01garbage", 11), 0);
    CHECK_MODEL_ERROR(open(), "header is not valid JSON");
  }
  SUBCASE("header JSON but not an object") {
    write_raw(p, "[1, 2, 3]", 0);
    CHECK_MODEL_ERROR(open(), "header is not a JSON object");
  }
  SUBCASE("tensor entry not an object") {
    write_raw(p, R"({"t": 5})", 0);
    CHECK_MODEL_ERROR(open(), "tensor 't' is not a JSON object");
  }
  SUBCASE("unknown dtype I8") {
    write_raw(p, R"({"t":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4);
    CHECK_MODEL_ERROR(open(),
                      "tensor 't' has dtype 'I8', which is not supported (supported: F32, F16, BF16, F8_E4M3, I32)");
  }
  SUBCASE("unsupported dtype F64") {
    write_raw(p, R"({"t":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8);
    CHECK_MODEL_ERROR(open(), "dtype 'F64'");
  }
  SUBCASE("missing dtype") {
    write_raw(p, R"({"t":{"shape":[1],"data_offsets":[0,4]}})", 4);
    CHECK_MODEL_ERROR(open(), "tensor 't' has no string dtype");
  }
  SUBCASE("negative dimension") {
    write_raw(p, R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
    CHECK_MODEL_ERROR(open(), "tensor 't' has shape [-1], which is not a list of non-negative integers");
  }
  SUBCASE("fractional dimension") {
    write_raw(p, R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4);
    CHECK_MODEL_ERROR(open(), "not a list of non-negative integers");
  }
  SUBCASE("shape that overflows") {
    write_raw(p, R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4);
    CHECK_MODEL_ERROR(open(), "too large to address");
  }
  SUBCASE("missing shape") {
    write_raw(p, R"({"t":{"dtype":"F32","data_offsets":[0,4]}})", 4);
    CHECK_MODEL_ERROR(open(), "tensor 't' has no shape array");
  }
  SUBCASE("data_offsets with three numbers") {
    write_raw(p, R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 8);
    CHECK_MODEL_ERROR(open(), "tensor 't' data_offsets [0,4,8] are not [begin, end]");
  }
  SUBCASE("data_offsets missing") {
    write_raw(p, R"({"t":{"dtype":"F32","shape":[1]}})", 4);
    CHECK_MODEL_ERROR(open(), "data_offsets (missing)");
  }
  SUBCASE("data_offsets out of order") {
    write_raw(p, R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8);
    CHECK_MODEL_ERROR(open(), "tensor 't' data_offsets [8, 4] are out of order");
  }
  SUBCASE("data_offsets out of range") {
    write_raw(p, R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12);
    CHECK_MODEL_ERROR(open(), "tensor 't' data_offsets [0, 16] exceed the data section of 12 bytes");
  }
  SUBCASE("offsets and shape disagree") {
    write_raw(p, R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
    CHECK_MODEL_ERROR(open(), "tensor 't' data_offsets [0, 8] hold 8 bytes, but shape [3] of F32 needs 12");
  }
  SUBCASE("overlapping tensors") {
    write_raw(p,
              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[6,10]}})",
              10);
    CHECK_MODEL_ERROR(open(), "tensors 'a' [0, 8] and 'b' [6, 10] overlap");
  }
  SUBCASE("one tensor inside another") {
    write_raw(p,
              R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
              R"("c":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})",
              20);
    CHECK_MODEL_ERROR(open(), "overlap");
  }
  SUBCASE("__metadata__ that is not an object") {
    write_raw(p, R"({"__metadata__": "pt"})", 0);
    CHECK_MODEL_ERROR(open(), "__metadata__ is not a JSON object");
  }
}

TEST_CASE("an empty tensor between others and a header padded with spaces are fine") {
  temp_dir dir{"troupe_safetensors"};
  const fs::path p = dir.path / "ok.safetensors";
  write_raw(p,
            R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
            R"("e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]},)"
            R"("__metadata__":{"format":"pt","n":3}})"
            "      ",
            4);
  const safetensors_file file = safetensors_file::open(p);
  CHECK(file.tensor_count() == 2);
  CHECK(file.metadata().size() == 1); // non-string metadata values are not read
  CHECK(file.get("e").data.empty());
}

TEST_CASE("the real file truncated anywhere, or with flipped header bytes, fails cleanly") {
  temp_dir dir{"troupe_safetensors"};
  const std::vector<char> good = read_bytes(stories_dir() / "model.safetensors");
  const fs::path p = dir.path / "model.safetensors";

  SUBCASE("cut inside the header") {
    write_bytes(p, std::vector<char>(good.begin(), good.begin() + 100));
    CHECK_MODEL_ERROR(safetensors_file::open(p), "header length 4944 exceeds file size 100");
  }
  SUBCASE("cut inside the data") {
    write_bytes(p, std::vector<char>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2)));
    CHECK_MODEL_ERROR(safetensors_file::open(p), "exceed the data section of 583124 bytes");
  }
  SUBCASE("cut by one byte") {
    write_bytes(p, std::vector<char>(good.begin(), good.end() - 1));
    CHECK_MODEL_ERROR(safetensors_file::open(p), "tensor 'model.norm.weight' data_offsets [1170944, 1171200] exceed");
  }
  SUBCASE("every truncation of a small file") {
    const std::vector<float> values{1, 2, 3, 4};
    const std::vector<tensor_view> tensors{{"a", weight_dtype::f32, {2}, as_bytes_of(values).first(8)},
                                           {"b", weight_dtype::bf16, {4}, as_bytes_of(values).first(8)}};
    write_safetensors(p, tensors);
    const std::vector<char> small = read_bytes(p);
    int failures = 0;
    for (std::size_t n = 0; n < small.size(); ++n) {
      write_bytes(p, std::vector<char>(small.begin(), small.begin() + static_cast<std::ptrdiff_t>(n)));
      try {
        (void)safetensors_file::open(p);
      } catch (const model_error&) {
        ++failures;
      }
    }
    CHECK(failures == static_cast<int>(small.size()));
  }
  SUBCASE("random byte flips in a small file's header never crash") {
    const std::vector<float> values{1, 2, 3, 4, 5, 6};
    const std::vector<tensor_view> tensors{{"w1", weight_dtype::f32, {2, 2}, as_bytes_of(values).first(16)},
                                           {"w2", weight_dtype::f16, {4}, as_bytes_of(values).subspan(16, 8)}};
    write_safetensors(p, tensors, {{"format", "pt"}});
    const std::vector<char> small = read_bytes(p);
    uint64_t header_length = 0;
    std::memcpy(&header_length, small.data(), 8);
    std::mt19937 rng(1234);
    int opened = 0, refused = 0;
    for (int round = 0; round < 1500; ++round) {
      std::vector<char> mutated = small;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips; ++f) {
        const std::size_t at = rng() % (8 + header_length);
        mutated[at] = static_cast<char>(rng() % 256);
      }
      write_bytes(p, mutated);
      try {
        const safetensors_file file = safetensors_file::open(p);
        // Whatever survived validation must be readable within the file.
        for (const std::string& name : file.names()) {
          const tensor_view t = file.get(name);
          CHECK(t.data.size() == static_cast<std::size_t>(t.element_count()) * dtype_size(t.dtype));
          volatile unsigned char sink = 0;
          for (const std::byte b : t.data)
            sink = sink ^ static_cast<unsigned char>(b);
        }
        ++opened;
      } catch (const model_error&) {
        ++refused;
      }
    }
    CHECK(opened + refused == 1500);
    CHECK(refused > 0);
  }
}

TEST_CASE("tensor_store: one file, a path to the file, and a missing folder") {
  const tensor_store store = tensor_store::open(stories_dir());
  CHECK(store.tensor_count() == 48);
  CHECK(store.shard_count() == 1);
  CHECK(store.contains("lm_head.weight"));
  CHECK_FALSE(store.contains("model.layers.5.mlp.up_proj.weight"));
  CHECK_MODEL_ERROR(store.get("model.layers.5.mlp.up_proj.weight"),
                    "tensor 'model.layers.5.mlp.up_proj.weight' is missing");

  const tensor_store direct = tensor_store::open(stories_dir() / "model.safetensors");
  CHECK(direct.names() == store.names());

  temp_dir dir{"troupe_safetensors"};
  CHECK_MODEL_ERROR(tensor_store::open(dir.path), "has neither model.safetensors nor model.safetensors.index.json");
  CHECK_MODEL_ERROR(tensor_store::open(dir.path / "nowhere"), "does not exist");
}

TEST_CASE("tensor_store: a sharded model reads the same bytes as the single file") {
  temp_dir dir{"troupe_safetensors"};
  const safetensors_file original = safetensors_file::open(stories_dir() / "model.safetensors");
  const std::vector<std::string> names = original.names();
  std::vector<tensor_view> first, second;
  json::object weight_map;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const bool in_first = i % 2 == 0;
    (in_first ? first : second).push_back(original.get(names[i]));
    weight_map[names[i]] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(dir.path / "model-00001-of-00002.safetensors", first);
  write_safetensors(dir.path / "model-00002-of-00002.safetensors", second);
  const auto write_index = [&](const json::object& map) {
    const json::object index{{"metadata", json::object{{"total_size", 1171200}}}, {"weight_map", map}};
    std::ofstream(dir.path / "model.safetensors.index.json") << json::serialize(index);
  };
  write_index(weight_map);

  const tensor_store store = tensor_store::open(dir.path);
  CHECK(store.shard_count() == 2);
  CHECK(store.tensor_count() == 48);
  CHECK(store.names() == names);
  for (const std::string& name : names) {
    const tensor_view a = original.get(name);
    const tensor_view b = store.get(name);
    CHECK(a.shape == b.shape);
    REQUIRE(a.data.size() == b.data.size());
    CHECK(std::memcmp(a.data.data(), b.data.data(), a.data.size()) == 0);
  }
  CHECK(store.file_of(names[1]).filename() == "model-00002-of-00002.safetensors");
  CHECK(store.file_of(names[0]).filename() == "model-00001-of-00002.safetensors");
  CHECK_MODEL_ERROR(store.file_of("nope"), "tensor 'nope' is missing");

  SUBCASE("a single model.safetensors next to the index wins, as in transformers") {
    fs::copy_file(stories_dir() / "model.safetensors", dir.path / "model.safetensors");
    CHECK(tensor_store::open(dir.path).shard_count() == 1);
  }
  SUBCASE("index naming a missing shard") {
    json::object broken = weight_map;
    broken[names[0]] = "model-00003-of-00002.safetensors";
    write_index(broken);
    CHECK_MODEL_ERROR(tensor_store::open(dir.path),
                      "names shard 'model-00003-of-00002.safetensors', which does not exist");
  }
  SUBCASE("index mapping a tensor to the wrong shard") {
    json::object broken = weight_map;
    broken[names[0]] = "model-00002-of-00002.safetensors";
    write_index(broken);
    CHECK_MODEL_ERROR(
        tensor_store::open(dir.path),
        "maps tensor '" + names[0] + "' to shard 'model-00002-of-00002.safetensors', which does not contain it");
  }
  SUBCASE("index reaching outside the folder") {
    json::object broken = weight_map;
    broken[names[0]] = "../model.safetensors";
    write_index(broken);
    CHECK_MODEL_ERROR(tensor_store::open(dir.path), "which is not a file name in the model folder");
  }
  SUBCASE("index that is not JSON") {
    std::ofstream(dir.path / "model.safetensors.index.json") << "{\"weight_map\": ";
    CHECK_MODEL_ERROR(tensor_store::open(dir.path), "model.safetensors.index.json: not valid JSON");
  }
  SUBCASE("index without a weight_map") {
    std::ofstream(dir.path / "model.safetensors.index.json") << "{\"metadata\": {}}";
    CHECK_MODEL_ERROR(tensor_store::open(dir.path), "weight_map is missing or not an object");
  }
  SUBCASE("index with a non-string shard") {
    json::object broken = weight_map;
    broken[names[0]] = 7;
    write_index(broken);
    CHECK_MODEL_ERROR(tensor_store::open(dir.path), "weight_map['" + names[0] + "'] is not a string");
  }
  SUBCASE("a corrupt shard") {
    write_bytes(dir.path / "model-00002-of-00002.safetensors", {'x', 'y'});
    CHECK_MODEL_ERROR(tensor_store::open(dir.path), "model-00002-of-00002.safetensors: file is 2 bytes");
  }
}
