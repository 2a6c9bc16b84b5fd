// The library's version. A training state records it (io/training_state.hpp)
// and a run resumes only under the version that wrote it, since another
// version's meta-step may compute other bits. CMakeLists.txt reads the
// project's version from this line, so there is one definition.
#pragma once

#include <string_view>

namespace platipus {

inline constexpr std::string_view library_version = "0.1.0";

}  // namespace platipus
