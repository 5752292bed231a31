# Warning and sanitizer flags, applied to Kiln's own targets only (never to a
# consumer's) through kiln_target_options().
add_library(kiln_compile_options INTERFACE)
target_compile_options(kiln_compile_options INTERFACE
  -Wall -Wextra -Wno-unused-parameter
  $<$<BOOL:${KILN_WERROR}>:-Werror>)
if(KILN_SANITIZE)
  target_compile_options(kiln_compile_options INTERFACE
    -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_link_options(kiln_compile_options INTERFACE -fsanitize=address,undefined)
endif()

function(kiln_target_options target)
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:kiln_compile_options>)
endfunction()
