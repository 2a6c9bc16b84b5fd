# Finds stb's image headers and its compiled library (Debian's libstb-dev:
# /usr/include/stb/stb_image.h and libstb, which holds stb_image,
# stb_image_resize and stb_image_write). Defines the target Stb::stb.
find_path(Stb_INCLUDE_DIR stb_image.h PATH_SUFFIXES stb)
find_library(Stb_LIBRARY stb)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Stb REQUIRED_VARS Stb_INCLUDE_DIR Stb_LIBRARY)
mark_as_advanced(Stb_INCLUDE_DIR Stb_LIBRARY)
if(Stb_FOUND AND NOT TARGET Stb::stb)
  add_library(Stb::stb UNKNOWN IMPORTED)
  set_target_properties(Stb::stb PROPERTIES IMPORTED_LOCATION "${Stb_LIBRARY}"
                                            INTERFACE_INCLUDE_DIRECTORIES "${Stb_INCLUDE_DIR}")
endif()
