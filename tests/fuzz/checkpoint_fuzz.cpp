// libFuzzer target for the checkpoint reader: any bytes, as a file, must load
// or be refused with platipus::error; a crash, a sanitizer report, a hang or
// another exception is a bug. Every input it ever finds becomes a regression
// test (tests/components_test.cpp) and a file in tests/fuzz/corpus/checkpoint.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "platipus/io/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("platipus-checkpoint-fuzz-" + std::to_string(::getpid()) + ".safetensors");
  platipus::write_file_atomically(path,
                                  std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    auto checkpoint = platipus::io::load_checkpoint<float>(path);
    (void)checkpoint;
  } catch (const platipus::error&) {
  }
  return 0;
}
