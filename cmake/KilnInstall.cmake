# Install rules and package export: `cmake --install` puts Kiln's public
# headers (include/kiln, with the .proto sources and the generated .pb.h), its
# libraries and the kiln program under the prefix, plus
# lib/cmake/kiln/{kilnConfig,kilnConfigVersion,kilnTargets}.cmake, so that
#
#   find_package(kiln REQUIRED)
#   target_link_libraries(app PRIVATE kiln::core)
#
# works against the install prefix. The build tree is exported too
# (kilnConfig.cmake and kilnTargets.cmake in ${PROJECT_BINARY_DIR}), so
# -Dkiln_DIR=<build dir> gives the same kiln:: names without installing.
# Included last from the top-level CMakeLists.txt, after every target exists.
if(NOT KILN_INSTALL)
  return()
endif()

include(CMakePackageConfigHelpers)

# Where kilnConfig.cmake goes, relative to the prefix (tests/install/ knows it too).
set(KILN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/kiln")

# What is installed and exported as kiln::<EXPORT_NAME>: one line per target.
# A library that adds a dependency must add it to cmake/kilnConfig.cmake.in too.
set(KILN_INSTALL_TARGETS
  kiln_core                  # kiln::core
)
list(APPEND KILN_INSTALL_TARGETS kiln_sim)       # kiln::sim
list(APPEND KILN_INSTALL_TARGETS kiln_local)     # kiln::local
list(APPEND KILN_INSTALL_TARGETS kiln_aws)       # kiln::aws
list(APPEND KILN_INSTALL_TARGETS kiln_journal_sqlite)  # kiln::journal_sqlite
list(APPEND KILN_INSTALL_TARGETS kiln_serve)     # kiln::serve
list(APPEND KILN_INSTALL_TARGETS kiln_agent)     # kiln::agent
if(TARGET kiln)
  list(APPEND KILN_INSTALL_TARGETS kiln)         # the kiln program, kiln::kiln
endif()

# kiln_compile_options (warnings, -Werror, sanitizers) reaches Kiln's targets
# only as $<BUILD_INTERFACE:...>. The installed export drops such items, so it
# is not installed. The build-tree export keeps them (as $<LINK_ONLY:...> for a
# static library's private links), and export() fails on a target outside
# every export set, so it gets an export set of its own, exported only for the
# build tree. There it also hands the sanitizer link flags to a consumer of a
# KILN_SANITIZE build, which needs the sanitizer runtime to link.
install(TARGETS kiln_compile_options EXPORT kilnBuildTreeOptions)  # installs no file
set_target_properties(kiln_compile_options PROPERTIES EXPORT_NAME internal_build_options)

install(TARGETS ${KILN_INSTALL_TARGETS}
  EXPORT kilnTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT kiln_runtime
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT kiln_runtime
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT kiln_development)

# Public headers and the API schema. lib/*/internal is never installed: only
# include/kiln is public.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kiln
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT kiln_development
  FILES_MATCHING PATTERN "*.h" PATTERN "*.proto")
# Generated message headers (kiln/v1/*.pb.h), beside the .proto they come from.
install(DIRECTORY ${PROJECT_BINARY_DIR}/gen/kiln
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT kiln_development
  FILES_MATCHING PATTERN "*.pb.h")

install(EXPORT kilnTargets
  NAMESPACE kiln::
  DESTINATION ${KILN_INSTALL_CMAKEDIR}
  COMPONENT kiln_development)

configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/install/kilnConfig.cmake
  INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
# 0.x releases: SameMajorVersion (0.2 satisfies a request for 0.1).
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
    ${PROJECT_BINARY_DIR}/cmake/install/kilnConfig.cmake
    ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
  DESTINATION ${KILN_INSTALL_CMAKEDIR}
  COMPONENT kiln_development)

# The build tree as a package: -Dkiln_DIR=<build dir>.
export(EXPORT kilnBuildTreeOptions
  NAMESPACE kiln::
  FILE ${PROJECT_BINARY_DIR}/kilnBuildTreeOptions.cmake)
export(EXPORT kilnTargets
  NAMESPACE kiln::
  FILE ${PROJECT_BINARY_DIR}/kilnTargets.cmake)
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kilnConfig.cmake
  INSTALL_DESTINATION ${PROJECT_BINARY_DIR}
  INSTALL_PREFIX ${PROJECT_BINARY_DIR})
