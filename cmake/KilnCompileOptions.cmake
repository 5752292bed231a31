# Warning and sanitizer flags, applied to Kiln's own targets only (never to a
# consumer's) through kiln_target_options().
add_library(kiln_compile_options INTERFACE)
target_compile_options(kiln_compile_options INTERFACE
  -Wall -Wextra -Wno-unused-parameter -Wshadow -Woverloaded-virtual
  $<$<BOOL:${KILN_WERROR}>:-Werror>)
if(KILN_SANITIZE)
  target_compile_options(kiln_compile_options INTERFACE
    -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(kiln_compile_options INTERFACE -fsanitize=address,undefined)
endif()
# ThreadSanitizer cannot be combined with AddressSanitizer. Debian's Abseil,
# protobuf, libcurl and libstdc++ are not instrumented: TSan does not see the
# happens-before of an absl::Mutex, so expect reports on data it guards.
if(KILN_SANITIZE_THREAD)
  if(KILN_SANITIZE)
    message(FATAL_ERROR "KILN_SANITIZE_THREAD and KILN_SANITIZE cannot both be ON")
  endif()
  # Debian's libprotobuf was built without TSan, and protobuf's map_field.h
  # adds members to MapFieldBase when __SANITIZE_THREAD__ is defined: our
  # inline and generated code would disagree with the library on its layout.
  # libstdc++ keys its TSan-safe shared_ptr release on the same macro, so it
  # is told directly (_GLIBCXX_TSAN).
  # KILN_SANITIZE_THREAD tells Kiln's own code (in place of the macro).
  target_compile_options(kiln_compile_options INTERFACE
    -fsanitize=thread -fno-omit-frame-pointer -U__SANITIZE_THREAD__ -D_GLIBCXX_TSAN=1
    -DKILN_SANITIZE_THREAD=1)
  target_link_options(kiln_compile_options INTERFACE -fsanitize=thread)
  # Nor is its absl::Mutex: every executable gets the annotations that tell
  # TSan what the library's locks, waits and notifications order.
  add_library(kiln_tsan_annotations OBJECT
    ${PROJECT_SOURCE_DIR}/tests/tsan/absl_sync_annotations.cc)
  target_link_libraries(kiln_tsan_annotations PRIVATE absl::synchronization kiln_compile_options)
endif()

# libFuzzer (clang only): Kiln's code instrumented for coverage, with
# AddressSanitizer and UBSan; tests/fuzz links the fuzzer's main.
if(KILN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "KILN_FUZZ needs clang (CXX=clang++): libFuzzer is clang's")
  endif()
  if(KILN_SANITIZE OR KILN_SANITIZE_THREAD)
    message(FATAL_ERROR "KILN_FUZZ brings its own sanitizers: not with KILN_SANITIZE*")
  endif()
  target_compile_options(kiln_compile_options INTERFACE
    -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=all)
  target_link_options(kiln_compile_options INTERFACE -fsanitize=address,undefined)
endif()

function(kiln_target_options target)
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:kiln_compile_options>)
  get_target_property(type ${target} TYPE)
  if(KILN_SANITIZE_THREAD AND type STREQUAL "EXECUTABLE")
    target_link_libraries(${target} PRIVATE kiln_tsan_annotations)
  endif()
endfunction()
