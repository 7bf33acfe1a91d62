# Used by the wasm build only (scripts/build-web.sh passes -Dnlohmann_json_DIR=here).
# Debian's own config points the include path at /usr/include, which would put the host's libc
# headers in front of Emscripten's sysroot. This one exposes only the nlohmann/ folder, through a
# symlink in the build tree.
find_path(BIASLAB_NLOHMANN_ROOT nlohmann/json.hpp PATHS /usr/include /usr/local/include
          NO_CMAKE_FIND_ROOT_PATH NO_DEFAULT_PATH)
if(NOT BIASLAB_NLOHMANN_ROOT)
  set(nlohmann_json_FOUND FALSE)
  return()
endif()
set(_biaslab_json_inc ${CMAKE_BINARY_DIR}/wasm-include)
file(MAKE_DIRECTORY ${_biaslab_json_inc})
if(NOT EXISTS ${_biaslab_json_inc}/nlohmann)
  file(CREATE_LINK ${BIASLAB_NLOHMANN_ROOT}/nlohmann ${_biaslab_json_inc}/nlohmann SYMBOLIC)
endif()
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
                        INTERFACE_INCLUDE_DIRECTORIES ${_biaslab_json_inc})
endif()
