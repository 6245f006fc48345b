// C++ run-time pieces the TFLM headers refer to. RuntimeShape only allocates
// for more than 5 dimensions, which the suite never uses, so every allocation
// is a bug: operator new aborts (exit code 134) instead of handing out memory.
#include <stddef.h>

#include "memtrace_rt.h"

extern "C" void abort(void) __attribute__((noreturn));

void *operator new(size_t) { abort(); }
void *operator new[](size_t) { abort(); }
void operator delete(void *) noexcept {}
void operator delete[](void *) noexcept {}
void operator delete(void *, size_t) noexcept {}
void operator delete[](void *, size_t) noexcept {}

extern "C" void __cxa_pure_virtual(void) { abort(); }
