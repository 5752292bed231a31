# Builds and runs tests/install/consumer against this build of Kiln, the way
# an outside project would use it. Run with `cmake -P` (ctest does, see
# CMakeLists.txt here), with these -D variables:
#
#   MODE          install: `cmake --install` the build into a fresh prefix and
#                 find Kiln there through CMAKE_PREFIX_PATH;
#                 build-tree: find Kiln in the build tree through kiln_DIR.
#   KILN_BUILD_DIR    the build tree to test
#   CONSUMER_DIR      the consumer project's sources
#   WORK_DIR          where the temporary prefix and consumer build go (they
#                     are removed afterwards, pass or fail)
#   GENERATOR, CXX_COMPILER, BUILD_TYPE, CXX_FLAGS, LINKER_FLAGS
#                     passed to the consumer's configure step
#   INCLUDEDIR, LIBDIR, CMAKEDIR   install layout relative to the prefix
#   PROGRAM           the kiln program relative to the prefix, if it is built
#   EXPECT            list of regular expressions the app's output must match
#   CONSUMER          core: the consumer asks for kiln::core alone, and the
#                     backends' dependencies are hidden from it (pkg-config
#                     sees only libpcre2-8; find_package may not find
#                     LibArchive, ZLIB, CURL or OpenSSL);
#                     full: every component, and app_full runs too
#   EXPECT_FULL       the same for app_full's output
cmake_minimum_required(VERSION 3.25)

foreach(var MODE KILN_BUILD_DIR CONSUMER_DIR WORK_DIR GENERATOR CXX_COMPILER CONSUMER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "consumer_test.cmake: -D${var}=... is required")
  endif()
endforeach()

string(RANDOM LENGTH 8 ALPHABET "abcdefghijklmnopqrstuvwxyz0123456789" suffix)
set(root "${WORK_DIR}/${MODE}-${CONSUMER}-${suffix}")
set(prefix "${root}/prefix")
set(consumer_build "${root}/consumer-build")
file(REMOVE_RECURSE "${root}")
file(MAKE_DIRECTORY "${root}")

function(fail what)
  file(REMOVE_RECURSE "${root}")
  message(FATAL_ERROR "consumer test (${MODE}, ${CONSUMER}): ${what}")
endfunction()

# Runs a command; on failure prints its output and fails the test.
function(run step)
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    fail("${step} failed (${rc}):\n${ARGN}\n--- stdout\n${out}\n--- stderr\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

if(MODE STREQUAL "install")
  run("install" ${CMAKE_COMMAND} --install "${KILN_BUILD_DIR}" --prefix "${prefix}")
  # What must be there, and what must not (private headers, sources).
  foreach(f
      "${INCLUDEDIR}/kiln/v1/sagemaker.proto"
      "${INCLUDEDIR}/kiln/v1/sagemaker.pb.h"
      "${LIBDIR}/libkiln_core.a"
      "${CMAKEDIR}/kilnConfig.cmake"
      "${CMAKEDIR}/kilnConfigVersion.cmake"
      "${CMAKEDIR}/kilnTargets.cmake"
      ${PROGRAM})
    if(NOT EXISTS "${prefix}/${f}")
      fail("${f} was not installed")
    endif()
  endforeach()
  file(GLOB_RECURSE unwanted RELATIVE "${prefix}"
    "${prefix}/${INCLUDEDIR}/*internal*" "${prefix}/${INCLUDEDIR}/*.cc"
    "${prefix}/${INCLUDEDIR}/*.in" "${prefix}/${CMAKEDIR}/*BuildTree*")
  if(unwanted)
    fail("installed files that are not public: ${unwanted}")
  endif()
  set(find_args "-DCMAKE_PREFIX_PATH=${prefix}")
elseif(MODE STREQUAL "build-tree")
  set(find_args "-Dkiln_DIR=${KILN_BUILD_DIR}")
else()
  fail("unknown MODE '${MODE}'")
endif()

set(hide_backends_deps)
if(CONSUMER STREQUAL "core")
  # pkg-config finds libpcre2-8 (kiln::core's) and nothing else.
  execute_process(COMMAND pkg-config --variable=pcfiledir libpcre2-8
    RESULT_VARIABLE rc OUTPUT_VARIABLE pcre2_pc_dir OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    fail("pkg-config does not find libpcre2-8")
  endif()
  file(MAKE_DIRECTORY "${root}/pkgconfig")
  file(COPY "${pcre2_pc_dir}/libpcre2-8.pc" DESTINATION "${root}/pkgconfig")
  set(hide_backends_deps ${CMAKE_COMMAND} -E env "PKG_CONFIG_LIBDIR=${root}/pkgconfig"
    PKG_CONFIG_PATH=)
  set(disable_finds
    -DCMAKE_DISABLE_FIND_PACKAGE_LibArchive=ON -DCMAKE_DISABLE_FIND_PACKAGE_ZLIB=ON
    -DCMAKE_DISABLE_FIND_PACKAGE_CURL=ON -DCMAKE_DISABLE_FIND_PACKAGE_OpenSSL=ON)
endif()

run("consumer configure" ${hide_backends_deps} ${CMAKE_COMMAND}
  -S "${CONSUMER_DIR}" "-DKILN_CONSUMER=${CONSUMER}" ${disable_finds} -B "${consumer_build}" -G "${GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
  "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}"
  ${find_args})
# The consumer must have found this Kiln, not some other one on the system.
if(MODE STREQUAL "install")
  set(expected_dir "${prefix}/${CMAKEDIR}")
else()
  set(expected_dir "${KILN_BUILD_DIR}")
endif()
file(REAL_PATH "${expected_dir}" expected_dir)
string(REGEX MATCH "kiln [0-9.]+ from ([^\n]*)" found_line "${last_output}")
if(NOT found_line)
  fail("the consumer did not report where it found kiln:\n${last_output}")
endif()
file(REAL_PATH "${CMAKE_MATCH_1}" found_dir)
if(NOT found_dir STREQUAL expected_dir)
  fail("the consumer found kiln in ${found_dir}, expected ${expected_dir}")
endif()

run("consumer build" ${CMAKE_COMMAND} --build "${consumer_build}")
run("app" "${consumer_build}/app")
set(output "${last_output}")
foreach(pattern IN LISTS EXPECT)
  if(NOT output MATCHES "${pattern}")
    fail("app output does not match '${pattern}':\n${output}")
  endif()
endforeach()

if(CONSUMER STREQUAL "full")
  run("app_full" "${consumer_build}/app_full")
  set(output_full "${last_output}")
  foreach(pattern IN LISTS EXPECT_FULL)
    if(NOT output_full MATCHES "${pattern}")
      fail("app_full output does not match '${pattern}':\n${output_full}")
    endif()
  endforeach()
  string(APPEND output "${output_full}")
endif()

file(REMOVE_RECURSE "${root}")
message(STATUS "consumer test (${MODE}, ${CONSUMER}) passed; printed:\n${output}")
