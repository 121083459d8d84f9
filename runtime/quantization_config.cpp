// Parses config.json's quantization_config. Exactly the schemes troupe can dequantize are
// accepted; everything else is refused naming the field, its value and what is accepted, so a
// checkpoint is never read with the wrong arithmetic.
#include "runtime/quantization_config.hpp"

#include "runtime/errors.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <regex>
#include <set>

namespace troupe::runtime {

namespace {

namespace json = boost::json;

std::string show(const json::value& v) {
  std::string text = json::serialize(v);
  if (text.size() > 60)
    text = text.substr(0, 57) + "...";
  return text;
}

// One JSON object of the config; remembers which keys were read, so that the rest can be
// refused (or ignored, when listed as harmless) by finish().
class section {
 public:
  section(const json::object& object, std::string_view source, std::string prefix)
      : object_(object), source_(source), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(std::string_view field, const std::string& what) const {
    throw model_error(std::string(source_) + ": " + prefix_ + std::string(field) + " " + what);
  }

  // nullptr when absent or null.
  const json::value* find(std::string_view field) {
    read_.insert(std::string(field));
    const json::value* v = object_.if_contains(field);
    return (v == nullptr || v->is_null()) ? nullptr : v;
  }

  const json::value& required(std::string_view field) {
    const json::value* v = find(field);
    if (v == nullptr)
      fail(field, "is missing");
    return *v;
  }

  std::string string(std::string_view field) {
    const json::value& v = required(field);
    if (!v.is_string())
      fail(field, "must be a string, got " + show(v));
    return std::string(v.get_string());
  }

  // A string that must be one of `accepted` (compared as written unless `any_case`).
  std::string one_of(std::string_view field, std::initializer_list<std::string_view> accepted, bool any_case = false) {
    std::string value = string(field);
    if (any_case)
      std::transform(value.begin(), value.end(), value.begin(), [](unsigned char c) { return std::tolower(c); });
    for (const std::string_view a : accepted)
      if (value == a)
        return value;
    fail(field,
         "'" + std::string(required(field).get_string()) + "' is not supported (accepted: " + list(accepted) + ")");
  }

  int64_t integer(std::string_view field) {
    const json::value& v = required(field);
    if (v.is_int64())
      return v.get_int64();
    if (v.is_uint64() && v.get_uint64() < (uint64_t{1} << 62))
      return static_cast<int64_t>(v.get_uint64());
    fail(field, "must be an integer, got " + show(v));
  }

  void expect_int(std::string_view field, int64_t accepted) {
    const int64_t v = integer(field);
    if (v != accepted)
      fail(field, std::to_string(v) + " is not supported (accepted: " + std::to_string(accepted) + ")");
  }

  bool boolean(std::string_view field) {
    const json::value& v = required(field);
    if (!v.is_bool())
      fail(field, "must be true or false, got " + show(v));
    return v.get_bool();
  }

  void expect_bool(std::string_view field, bool accepted) {
    if (boolean(field) != accepted)
      fail(field, std::string(accepted ? "false" : "true") +
                      " is not supported (accepted: " + (accepted ? "true" : "false") + ")");
  }

  // A list of strings; absent or null is empty.
  std::vector<std::string> strings(std::string_view field) {
    std::vector<std::string> out;
    const json::value* v = find(field);
    if (v == nullptr)
      return out;
    if (!v->is_array())
      fail(field, "must be a list of strings or null, got " + show(*v));
    for (const json::value& item : v->get_array()) {
      if (!item.is_string())
        fail(field, "must be a list of strings, got " + show(*v));
      out.emplace_back(item.get_string());
    }
    return out;
  }

  // Every key not read: ignored when listed in `harmless` or null, else refused.
  void finish(std::initializer_list<std::string_view> harmless) const {
    for (const auto& [key, value] : object_) {
      if (read_.count(std::string(key)) != 0 || value.is_null())
        continue;
      if (std::find(harmless.begin(), harmless.end(), std::string_view(key)) != harmless.end())
        continue;
      fail(key, show(value) + " is not supported (troupe reads " + list_read() + " here)");
    }
  }

 private:
  static std::string list(std::initializer_list<std::string_view> items) {
    std::string text;
    for (const std::string_view item : items)
      text += (text.empty() ? "" : ", ") + std::string(item);
    return text;
  }
  std::string list_read() const {
    std::string text;
    for (const std::string& item : read_)
      text += (text.empty() ? "" : ", ") + item;
    return text;
  }

  const json::object& object_;
  std::string_view source_;
  std::string prefix_;
  std::set<std::string> read_;
};

void read_compressed_tensors(section& s, const std::string& source, quantization_config& q) {
  // "naive-quantized" is what older llm-compressor versions wrote for the same FP8 tensors; the
  // loader checks that the weights really are F8_E4M3.
  s.one_of("format", {"float-quantized", "naive-quantized"});
  q.ignore = s.strings("ignore");
  const json::value& groups = s.required("config_groups");
  if (!groups.is_object() || groups.get_object().size() != 1)
    s.fail("config_groups", "must hold exactly one group, got " + show(groups));
  const auto& [group_name, group_value] = *groups.get_object().begin();
  if (!group_value.is_object())
    s.fail("config_groups", "must hold a group object, got " + show(group_value));
  section g(group_value.get_object(), source, "quantization_config.config_groups." + std::string(group_name) + ".");
  if (g.strings("targets") != std::vector<std::string>{"Linear"})
    g.fail("targets", show(g.required("targets")) + " is not supported (accepted: [\"Linear\"])");

  const json::value& weights_value = g.required("weights");
  if (!weights_value.is_object())
    g.fail("weights", "must be an object, got " + show(weights_value));
  section w(weights_value.get_object(), source,
            "quantization_config.config_groups." + std::string(group_name) + ".weights.");
  w.expect_int("num_bits", 8);
  w.one_of("type", {"float"});
  q.scheme = w.one_of("strategy", {"tensor", "channel"}) == "tensor" ? quantization_scheme::fp8_per_tensor
                                                                     : quantization_scheme::fp8_per_channel;
  w.expect_bool("symmetric", true);
  w.expect_bool("dynamic", false);
  // group_size, block_structure, actorder: read only when null (finish() refuses any other value).
  w.finish({"observer", "observer_kwargs", "scale_dtype", "zp_dtype"});

  if (const json::value* activations = g.find("input_activations")) {
    if (!activations->is_object())
      g.fail("input_activations", "must be an object or null, got " + show(*activations));
    section a(activations->get_object(), source,
              "quantization_config.config_groups." + std::string(group_name) + ".input_activations.");
    a.expect_int("num_bits", 8);
    a.one_of("type", {"float"});
    const std::string strategy = a.one_of("strategy", {"tensor", "token"});
    const bool dynamic = a.boolean("dynamic");
    a.finish({"symmetric", "observer", "observer_kwargs", "scale_dtype", "zp_dtype"});
    q.activations = std::string(dynamic ? "dynamic" : "static") + " per-" + strategy;
  }
  // output_activations, kv_cache_scheme, transform_config: only null is read (finish() refuses a value).
  g.finish({});
  if (const json::value* sparsity = s.find("sparsity_config"))
    if (!sparsity->is_object() || !sparsity->get_object().empty())
      s.fail("sparsity_config", show(*sparsity) + " is not supported (accepted: null or {})");
  s.finish({"quantization_status", "version", "global_compression_ratio"});
}

void read_hf_fp8(section& s, quantization_config& q) {
  q.scheme = quantization_scheme::fp8_block;
  s.one_of("fmt", {"e4m3"});
  q.activations = s.one_of("activation_scheme", {"dynamic", "static"});
  const json::value& block = s.required("weight_block_size");
  const auto positive = [](const json::value& v) {
    return (v.is_int64() && v.get_int64() > 0 && v.get_int64() <= (1 << 20)) ||
           (v.is_uint64() && v.get_uint64() <= (1 << 20) && v.get_uint64() > 0);
  };
  if (!block.is_array() || block.get_array().size() != 2 || !positive(block.get_array()[0]) ||
      !positive(block.get_array()[1]))
    s.fail("weight_block_size", show(block) + " is not supported (accepted: [rows, columns] of positive integers)");
  q.block_rows = static_cast<int>(block.get_array()[0].to_number<int64_t>());
  q.block_columns = static_cast<int>(block.get_array()[1].to_number<int64_t>());
  q.not_converted = s.strings("modules_to_not_convert");
  s.finish({});
}

void read_awq(section& s, quantization_config& q) {
  q.scheme = quantization_scheme::awq;
  s.expect_int("bits", 4);
  const int64_t group = s.integer("group_size");
  if (group != 128 && group != 64 && group != 32)
    s.fail("group_size", std::to_string(group) + " is not supported (accepted: 128, 64, 32)");
  q.group_size = static_cast<int>(group);
  s.expect_bool("zero_point", true);
  s.one_of("version", {"gemm"}, true);
  q.not_converted = s.strings("modules_to_not_convert");
  // do_fuse and fuse_max_seq_len are AutoAWQ's own inference switches; backend names the tool.
  s.finish({"do_fuse", "fuse_max_seq_len", "backend"});
}

} // namespace

bool quantization_config::quantizes(std::string_view module) const {
  for (const std::string& entry : ignore) {
    if (entry.starts_with("re:")) {
      const std::regex pattern(entry.substr(3));
      if (std::regex_search(module.begin(), module.end(), pattern, std::regex_constants::match_continuous))
        return false;
    } else if (module == entry) {
      return false;
    }
  }
  for (const std::string& entry : not_converted)
    if (module.find(entry) != std::string_view::npos)
      return false;
  return true;
}

std::string to_string(const quantization_config& q) {
  switch (q.scheme) {
    case quantization_scheme::fp8_per_tensor:
      return "fp8 (compressed-tensors, per-tensor)";
    case quantization_scheme::fp8_per_channel:
      return "fp8 (compressed-tensors, per-channel)";
    case quantization_scheme::fp8_block:
      return "fp8 (block-wise " + std::to_string(q.block_rows) + "x" + std::to_string(q.block_columns) + ")";
    case quantization_scheme::awq:
      return "awq int4 (gemm, group " + std::to_string(q.group_size) + ")";
  }
  return "?";
}

quantization_config parse_quantization_config(const boost::json::object& object, std::string_view source) {
  section s(object, source, "quantization_config.");
  quantization_config q;
  const std::string method = s.one_of("quant_method", {"compressed-tensors", "fp8", "awq"});
  if (method == "compressed-tensors")
    read_compressed_tensors(s, std::string(source), q);
  else if (method == "fp8")
    read_hf_fp8(s, q);
  else
    read_awq(s, q);
  for (const std::string& entry : q.ignore)
    if (entry.starts_with("re:")) {
      try {
        const std::regex pattern(entry.substr(3));
      } catch (const std::regex_error& e) {
        s.fail("ignore", "entry '" + entry + "' is not a valid regular expression (" + e.what() + ")");
      }
    }
  return q;
}

} // namespace troupe::runtime
