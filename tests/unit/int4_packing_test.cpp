// INT4 codes for the CUDA runner: recovered exactly from an AWQ checkpoint's dequantized values
// and packed in the nibble order the kernels read (kernels/cuda/int4_linear.hpp); an AWQ
// checkpoint's groups come with its linear layers; values that are not (code - zero) * scale are
// refused, naming the element.
#include "runtime/int4_packing.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/weight_shard.hpp"

#include <doctest/doctest.h>

#include "tests/support/quantized_checkpoint.hpp"
#include "tests/support/temp_dir.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace troupe::runtime;
using namespace troupe::testing;

std::string refusal(std::span<const float> values, std::size_t columns, const int4_groups& g) {
  try {
    pack_int4(values, columns, g);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("pack_int4 lays codes out as the tensor cores' A fragments: tiles of 16 rows, vectors of 64 columns") {
  // 16 x 64, zero 0, scale 1: every code 0 but (9, 19) = 5 and (2, 40) = 11.
  std::vector<float> values(16 * 64, 0.0f);
  values[9 * 64 + 19] = 5;
  values[2 * 64 + 40] = 11;
  const int4_packed p = pack_int4(values, 64, {64, std::vector<float>(16, 1.0f), std::vector<float>(16, 0.0f)});
  REQUIRE(p.codes.size() == 16 * 64 / 8);
  // (9, 19): row g = 1 of the upper half, k-step 1, column 3 = 2t + 1 with t = 1: lane 5, word 1 of
  // its 4, the high half's nibble of register 1 (rows g + 8, columns 2t..): bit 16 + 4.
  CHECK(int4_place(64, 9, 19).word == 5 * 4 + 1);
  CHECK(int4_place(64, 9, 19).bit == 20);
  // (2, 40): g = 2, k-step 2, column 8 = 2t + 8 with t = 0: lane 8, word 2, register 2's low nibble.
  CHECK(int4_place(64, 2, 40).word == 8 * 4 + 2);
  CHECK(int4_place(64, 2, 40).bit == 8);
  for (std::size_t w = 0; w < p.codes.size(); ++w) {
    CAPTURE(w);
    CHECK(p.codes[w] == (w == 21 ? 5u << 20 : w == 34 ? 11u << 8 : 0u));
  }
  // Every (row, column) of a padded matrix has a place of its own inside the codes.
  const std::size_t rows = 37, columns = 96; // 3 tiles, 2 vectors
  std::vector<int> seen(48 * 128 / 8 * 8, 0);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < columns; ++c) {
      const int4_code_place at = int4_place(columns, r, c);
      REQUIRE(at.word < 48 * 128 / 8);
      REQUIRE(at.bit % 4 == 0);
      ++seen[at.word * 8 + static_cast<std::size_t>(at.bit / 4)];
    }
  CHECK(std::count(seen.begin(), seen.end(), 1) == static_cast<long>(rows * columns));
  CHECK(std::count_if(seen.begin(), seen.end(), [](int n) { return n > 1; }) == 0);
}

TEST_CASE("pack_int4 recovers every code of values made as (code - zero) * scale, for groups of 16 to 128") {
  std::mt19937 rng(7);
  for (const std::size_t group : {16u, 32u, 64u, 128u}) {
    CAPTURE(group);
    const std::size_t rows = 5, columns = 2 * group + (group >= 32 ? group : 0);
    const std::size_t per_row = columns / group;
    int4_groups g{group, std::vector<float>(rows * per_row), std::vector<float>(rows * per_row)};
    std::uniform_int_distribution<int> code(0, 15);
    for (std::size_t i = 0; i < g.scales.size(); ++i) {
      // f16-like scales (what AWQ stores), one zero scale, zeros anywhere in [0, 15].
      g.scales[i] = i == 3 ? 0.0f : std::ldexp(static_cast<float>(1024 + rng() % 1024), -20 - static_cast<int>(rng() % 6));
      g.zeros[i] = static_cast<float>(code(rng));
    }
    std::vector<int> codes(rows * columns);
    std::vector<float> values(rows * columns);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::size_t r = i / columns, gi = r * per_row + (i % columns) / group;
      codes[i] = code(rng);
      if (g.scales[gi] == 0.0f) // a zero scale: every value 0, the code is the zero
        codes[i] = static_cast<int>(g.zeros[gi]);
      values[i] = static_cast<float>(codes[i] - static_cast<int>(g.zeros[gi])) * g.scales[gi];
    }
    const int4_packed p = pack_int4(values, columns, g);
    CHECK(p.group == group);
    CHECK(p.codes.size() == 16 * ((columns + 63) / 64 * 64) / 8); // 5 rows: one tile
    REQUIRE(p.groups.size() == 2 * rows * per_row);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < values.size(); ++i)
      differ += int4_code(p, columns, i / columns, i % columns) != codes[i];
    CHECK(differ == 0);
    for (std::size_t i = 0; i < g.scales.size(); ++i) {
      CHECK(p.groups[2 * i] == g.scales[i]);
      CHECK(p.groups[2 * i + 1] == g.zeros[i]);
    }
  }
}

TEST_CASE("pack_int4 refuses values that are not codes, bad zeros and groups that do not fit, naming the place") {
  const int4_groups one{16, {0.5f}, {8.0f}};
  std::vector<float> values(16, 0.5f); // code 9
  CHECK(refusal(values, 16, one).empty());
  values[5] = 0.75f; // 1.5 steps: no code gives it
  const std::string between = refusal(values, 16, one);
  CHECK(between.find("row 0 column 5") != std::string::npos);
  values[5] = 4.5f; // code 17
  CHECK(refusal(values, 16, one).find("column 5") != std::string::npos);
  values[5] = std::nanf("");
  CHECK(refusal(values, 16, one).find("column 5") != std::string::npos);
  values[5] = 0.5f;
  CHECK(refusal(values, 16, {16, {0.5f}, {16.0f}}).find("zero 16") != std::string::npos);
  CHECK(refusal(values, 16, {16, {0.5f}, {2.5f}}).find("zero 2.5") != std::string::npos);
  CHECK(refusal(values, 16, {16, {0.5f, 0.5f}, {8.0f, 8.0f}}).find("2 scales") != std::string::npos);
  CHECK(refusal(values, 16, {8, {0.5f, 0.5f}, {8.0f, 8.0f}}).find("group of 8") != std::string::npos);
  CHECK(refusal(std::vector<float>(24, 0.5f), 24, {24, {0.5f}, {8.0f}}).find("24 columns") != std::string::npos);
  CHECK(refusal(std::vector<float>(24, 0.5f), 16, one).find("24 values") != std::string::npos);
}

TEST_CASE("an AWQ checkpoint's linear layers come with their groups, and pack to the codes it stored") {
  const model_config& stories = stories_model().config;
  const auto hidden = static_cast<std::size_t>(stories.hidden_size);
  for (const quant_format& f : {quant_format{"awq group 32", quant_kind::awq, 0, 0, 32},
                                quant_format{"awq group 64", quant_kind::awq, 0, 0, 64}}) {
    CAPTURE(f.label);
    temp_dir dir("troupe_int4_groups");
    write_quantized_stories(dir.path, f);
    const model_config cfg = load_model_config(dir.path);
    const model_weights w = load_model_weights(tensor_store::open(dir.path), cfg);
    std::size_t packed_layers = 0;
    for (const layer_weights& l : w.layers) {
      // The test checkpoint quantizes attention, not the MLP (tests/support/quantized_checkpoint.hpp).
      CHECK(l.gate_proj_int4.empty());
      CHECK(l.up_proj_int4.empty());
      CHECK(l.down_proj_int4.empty());
      CHECK(l.q_proj_fp8.empty());
      for (const auto& [values, groups] :
           {std::pair{&l.q_proj, &l.q_proj_int4}, std::pair{&l.k_proj, &l.k_proj_int4},
            std::pair{&l.v_proj, &l.v_proj_int4}, std::pair{&l.o_proj, &l.o_proj_int4}}) {
        REQUIRE_FALSE(groups->empty());
        CHECK(groups->group == static_cast<std::size_t>(f.group));
        const int4_packed p = pack_int4(*values, hidden, *groups);
        // Unpacked again, each code gives back the loaded value.
        const std::size_t per_row = hidden / groups->group;
        std::size_t differ = 0;
        for (std::size_t i = 0; i < values->size(); ++i) {
          const std::size_t r = i / hidden, c = i % hidden, g = r * per_row + c / groups->group;
          const int code = int4_code(p, hidden, r, c);
          differ += static_cast<float>(code - static_cast<int>(groups->zeros[g])) * groups->scales[g] != (*values)[i];
        }
        CHECK(differ == 0);
        ++packed_layers;
      }
    }
    CHECK(packed_layers == 4 * w.layers.size());
  }
}
