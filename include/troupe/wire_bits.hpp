// A float or double field as its bit pattern in a message's inspect overload. CAF 0.17 writes floats
// in a portable encoding that turns NaN into an ordinary number and never ends on an infinity (its
// normalising loop halves inf forever); troupe's messages carry both (a prompt's first logprob is
// NaN, a banned token's is -inf, a host may send any float), so on the wire between processes each
// float is its IEEE bits, as every machine troupe runs on stores them.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/none.hpp>

namespace troupe {

template <class T>
struct wire_bits {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  T& value;
};

template <class T>
wire_bits<T> bits_of(T& value) {
  return {value};
}

template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, wire_bits<T>& x) {
  using word = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  word bits = std::bit_cast<word>(x.value);
  return f(bits, caf::meta::load_callback([&]() -> caf::error {
             x.value = std::bit_cast<T>(bits);
             return caf::none;
           }));
}

} // namespace troupe
