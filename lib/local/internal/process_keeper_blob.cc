// The process keeper's executable (process_keeper.h), embedded: its bytes lie
// between kiln_process_keeper_start and kiln_process_keeper_end (declared in
// spawn.cc, which runs it from a memory file). KILN_PROCESS_KEEPER_PATH is
// the executable's path in the build tree (lib/local/CMakeLists.txt).
__asm__(
    ".section .rodata.kiln_process_keeper,\"a\"\n"
    ".balign 16\n"
    ".globl kiln_process_keeper_start\n"
    ".hidden kiln_process_keeper_start\n"
    "kiln_process_keeper_start:\n"
    ".incbin \"" KILN_PROCESS_KEEPER_PATH "\"\n"
    ".globl kiln_process_keeper_end\n"
    ".hidden kiln_process_keeper_end\n"
    "kiln_process_keeper_end:\n"
    ".previous\n");
