// stories260k's files in a temporary folder, its config.json turned into a Mistral whose every layer has a
// sliding window of `window` positions: a trained model to serve sliding-window attention with (the actor and
// GPU engine tests).
#pragma once

#include <boost/json.hpp>

#include <filesystem>
#include <fstream>

#include "tests/support/data_root.hpp"
#include "tests/support/stories_model.hpp"
#include "tests/support/temp_dir.hpp"

namespace troupe::testing {

struct sliding_stories {
  temp_dir dir{"troupe_sliding"};
  explicit sliding_stories(int window) {
    for (const auto& entry : std::filesystem::directory_iterator(stories_dir()))
      std::filesystem::copy_file(entry.path(), dir.path / entry.path().filename());
    auto config = read_json(stories_dir() / "config.json").as_object();
    config["model_type"] = "mistral";
    config["architectures"] = boost::json::array{"MistralForCausalLM"};
    config["sliding_window"] = window;
    std::ofstream(dir.path / "config.json") << boost::json::serialize(config);
  }
};

} // namespace troupe::testing
