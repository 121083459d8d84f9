// The doctest main of the GPU tests: on a machine without a CUDA device the
// tests are reported as skipped (exit code 77, CTest's SKIP_RETURN_CODE), so the
// same suite runs in CI (no GPU) and on the GPU machine.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string_view>

#include "kernels/cuda/device.hpp"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]).starts_with("--list") || std::string_view(argv[i]).starts_with("-ltc"))
      listing = true;
  if (!listing && troupe::kernels::cuda::device_count() == 0) {
    std::puts("no CUDA device: GPU tests skipped");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
