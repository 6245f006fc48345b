/*
 * The memtrace port: `memtrace_port` (section .memtrace, which the linker
 * scripts put alone on its own 4 KiB page) and `memtrace_signal`, the one
 * function that stores commands to it (include/memtrace.h).
 *
 * In libmemtrace_rt.a this is a member of its own, which the linker takes
 * only when nothing else defines the two symbols: a program that follows the
 * older instructions and defines MEMTRACE_IMPLEMENTATION in one of its files
 * links just as well (its definitions win, this member stays out).
 */
#define MEMTRACE_IMPLEMENTATION
#include "memtrace.h"
