// troupe-tokenize: encode stdin to a JSON id list, or (--decode) a JSON id list back to
// text, with a model's tokenizer. For checking tokenizers by hand and from scripts.
#include <boost/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/tokenizer.hpp"

namespace {

constexpr std::string_view usage =
    "usage: troupe-tokenize --tokenizer DIR_OR_FILE [--decode] [--no-special] [--keep-special]\n"
    "  reads all of stdin:\n"
    "  encode (default): text -> JSON array of ids, with the tokenizer's special tokens\n"
    "                    (BOS/EOS per its post-processor); --no-special leaves them out\n"
    "  --decode:         JSON array of ids -> text; special tokens are dropped unless\n"
    "                    --keep-special is given\n";

struct options {
  std::string tokenizer_path;
  bool decode = false;
  bool no_special = false;
  bool keep_special = false;
};

options parse_args(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--tokenizer") {
      if (i + 1 >= argc)
        throw std::invalid_argument("--tokenizer needs a path");
      o.tokenizer_path = argv[++i];
    } else if (arg.starts_with("--tokenizer=")) {
      o.tokenizer_path = std::string(arg.substr(std::string_view("--tokenizer=").size()));
    } else if (arg == "--decode") {
      o.decode = true;
    } else if (arg == "--no-special") {
      o.no_special = true;
    } else if (arg == "--keep-special") {
      o.keep_special = true;
    } else if (arg == "--help" || arg == "-h") {
      std::cout << usage;
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown argument '" + std::string(arg) + "'");
    }
  }
  if (o.tokenizer_path.empty())
    throw std::invalid_argument("--tokenizer is required");
  return o;
}

std::vector<troupe::token_id> parse_ids(const std::string& text) {
  boost::system::error_code ec;
  const auto value = boost::json::parse(text, ec);
  if (ec || !value.is_array())
    throw std::invalid_argument("stdin must be a JSON array of token ids");
  std::vector<troupe::token_id> ids;
  for (const auto& v : value.get_array()) {
    const bool fits = (v.is_int64() && v.get_int64() >= 0 &&
                       v.get_int64() <= std::numeric_limits<troupe::token_id>::max()) ||
                      (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(
                                                              std::numeric_limits<troupe::token_id>::max()));
    if (!fits)
      throw std::invalid_argument("stdin must be a JSON array of non-negative token ids");
    ids.push_back(static_cast<troupe::token_id>(v.to_number<std::int64_t>()));
  }
  return ids;
}

} // namespace

int main(int argc, char** argv) {
  try {
    const auto opts = parse_args(argc, argv);
    const auto tok = troupe::tokenizer::load(opts.tokenizer_path);
    std::ios::sync_with_stdio(false);
    const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    if (opts.decode) {
      std::cout << tok.decode(parse_ids(input), !opts.keep_special);
    } else {
      const auto ids = tok.encode(input, !opts.no_special);
      std::string out = "[";
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i > 0)
          out += ',';
        out += std::to_string(ids[i]);
      }
      out += "]\n";
      std::cout << out;
    }
    std::cout.flush();
    return std::cout ? 0 : 1;
  } catch (const std::invalid_argument& e) {
    std::cerr << "troupe-tokenize: " << e.what() << "\n" << usage;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "troupe-tokenize: " << e.what() << "\n";
    return 1;
  }
}
