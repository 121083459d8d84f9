// Boost.JSON's implementation, compiled into the fuzz build with the fuzzer's coverage
// and the sanitizers (the regular build links Debian's prebuilt library instead).
#include <boost/json/src.hpp>
