// platform.cc — what TFLM expects from the platform it runs on, for the
// memtrace emulator: log output (kept, not printed: the last message becomes
// the exit reason), a clock, and the few C/C++ run-time symbols that
// rt/ does not define because no other guest needs them.
//
// The formatter is written here rather than taken from newlib: newlib's
// vsnprintf allocates (dtoa for %f goes through malloc), and the guests have
// no heap and no system calls.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tflm/runner.h"

namespace {

// The first and the last complete message TFLM logged (MicroPrintf ends
// every message with one DebugLog("\r\n") call; the text before it is the
// message). The first of a failure's chain names the cause (e.g. the arena
// bytes missing), the last the step that gave up.
char g_first[mtflm::kMaxReason];
char g_last[mtflm::kMaxReason];
char g_both[mtflm::kMaxReason];
char g_pending[mtflm::kMaxReason];
size_t g_pending_len;
// The same since mark_log() (the operator being invoked).
char g_mark_first[mtflm::kMaxReason];
char g_mark_last[mtflm::kMaxReason];

struct Sink {
    char *buf;
    size_t cap;  // bytes buf can hold, including the NUL
    size_t len;  // characters produced (may exceed cap - 1, as vsnprintf)
    void put(char c) {
        if (len + 1 < cap) {
            buf[len] = c;
        }
        ++len;
    }
    void puts(const char *s, size_t n) {
        for (size_t i = 0; i < n; ++i) {
            put(s[i]);
        }
    }
    void pad(char c, int n) {
        for (; n > 0; --n) {
            put(c);
        }
    }
};

struct Spec {
    bool left = false;
    bool zero = false;
    bool plus = false;
    bool space = false;
    int width = 0;
    int precision = -1;
};

// Emits `body` (n characters) with a sign/prefix, honouring width and
// zero padding.
void emit(Sink &out, const Spec &spec, const char *prefix, const char *body, size_t n) {
    const size_t plen = strlen(prefix);
    const int fill = spec.width - static_cast<int>(plen + n);
    if (!spec.left && !spec.zero) {
        out.pad(' ', fill);
    }
    out.puts(prefix, plen);
    if (!spec.left && spec.zero) {
        out.pad('0', fill);
    }
    out.puts(body, n);
    if (spec.left) {
        out.pad(' ', fill);
    }
}

void emit_unsigned(Sink &out, Spec spec, uint64_t v, unsigned base, bool upper, const char *sign) {
    char digits[32];
    size_t n = 0;
    const char *set = upper ? "0123456789ABCDEF" : "0123456789abcdef";
    do {
        digits[n++] = set[v % base];
        v /= base;
    } while (v != 0);
    // Precision: minimum number of digits.
    while (spec.precision >= 0 && n < static_cast<size_t>(spec.precision) && n < sizeof(digits)) {
        digits[n++] = '0';
    }
    char body[32];
    for (size_t i = 0; i < n; ++i) {
        body[i] = digits[n - 1 - i];
    }
    if (spec.precision >= 0) {
        spec.zero = false;
    }
    emit(out, spec, sign, body, n);
}

// %f / %e / %g with a fixed number of decimals. Not correctly rounded in
// every last digit (no big-number arithmetic): the text only ends up in exit
// reasons.
void emit_float(Sink &out, Spec spec, double v, char conv) {
    const char *sign = v < 0 ? "-" : spec.plus ? "+" : spec.space ? " " : "";
    if (v < 0) {
        v = -v;
    }
    if (v != v) {
        emit(out, spec, sign, "nan", 3);
        return;
    }
    if (v > 1.7976931348623157e308) {
        emit(out, spec, sign, "inf", 3);
        return;
    }
    int prec = spec.precision < 0 ? 6 : spec.precision;
    if (prec > 9) {
        prec = 9;
    }
    int exp10 = 0;
    const bool expo = conv == 'e' || conv == 'E' ||
                      ((conv == 'g' || conv == 'G') && v != 0 && (v < 1e-4 || v >= 1e9));
    if (expo) {
        while (v >= 10) {
            v /= 10;
            ++exp10;
        }
        while (v != 0 && v < 1) {
            v *= 10;
            --exp10;
        }
    }
    if (v >= 1.8e19) {  // too large for the integer part below
        emit(out, spec, sign, "big", 3);
        return;
    }
    uint64_t scale = 1;
    for (int i = 0; i < prec; ++i) {
        scale *= 10;
    }
    uint64_t whole = static_cast<uint64_t>(v);
    uint64_t frac = static_cast<uint64_t>((v - static_cast<double>(whole)) * static_cast<double>(scale) + 0.5);
    if (frac >= scale) {
        frac -= scale;
        ++whole;
    }
    char body[64];
    size_t n = 0;
    char tmp[24];
    size_t t = 0;
    do {
        tmp[t++] = static_cast<char>('0' + whole % 10);
        whole /= 10;
    } while (whole != 0);
    while (t > 0) {
        body[n++] = tmp[--t];
    }
    if (prec > 0) {
        body[n++] = '.';
        for (int i = prec - 1; i >= 0; --i) {
            uint64_t d = frac;
            for (int k = 0; k < i; ++k) {
                d /= 10;
            }
            body[n++] = static_cast<char>('0' + d % 10);
        }
    }
    if (expo) {
        body[n++] = (conv == 'E' || conv == 'G') ? 'E' : 'e';
        body[n++] = exp10 < 0 ? '-' : '+';
        const int e = exp10 < 0 ? -exp10 : exp10;
        if (e >= 100) {
            body[n++] = static_cast<char>('0' + e / 100);
        }
        body[n++] = static_cast<char>('0' + (e / 10) % 10);
        body[n++] = static_cast<char>('0' + e % 10);
    }
    emit(out, spec, sign, body, n);
}

}  // namespace

namespace mtflm {

int format(char *buf, size_t cap, const char *fmt, va_list ap) {
    Sink out{buf, cap, 0};
    for (const char *p = fmt; *p; ++p) {
        if (*p != '%') {
            out.put(*p);
            continue;
        }
        ++p;
        Spec spec;
        for (;; ++p) {
            if (*p == '-') spec.left = true;
            else if (*p == '0') spec.zero = true;
            else if (*p == '+') spec.plus = true;
            else if (*p == ' ') spec.space = true;
            else if (*p == '#') {}
            else break;
        }
        if (*p == '*') {
            spec.width = va_arg(ap, int);
            if (spec.width < 0) {
                spec.left = true;
                spec.width = -spec.width;
            }
            ++p;
        } else {
            while (*p >= '0' && *p <= '9') spec.width = spec.width * 10 + (*p++ - '0');
        }
        if (*p == '.') {
            ++p;
            spec.precision = 0;
            if (*p == '*') {
                spec.precision = va_arg(ap, int);
                ++p;
            } else {
                while (*p >= '0' && *p <= '9') spec.precision = spec.precision * 10 + (*p++ - '0');
            }
        }
        // Length: l, ll, h, hh, z, t, j (all read as the promoted type).
        int longs = 0;
        bool size_like = false;
        for (;; ++p) {
            if (*p == 'l') ++longs;
            else if (*p == 'z' || *p == 't' || *p == 'j') size_like = true;
            else if (*p == 'h' || *p == 'L') {}
            else break;
        }
        const char conv = *p;
        if (conv == '\0') {
            break;
        }
        switch (conv) {
            case 'd':
            case 'i': {
                int64_t v;
                if (longs >= 2 || (size_like && sizeof(size_t) == 8)) v = va_arg(ap, long long);
                else if (longs == 1) v = va_arg(ap, long);
                else if (size_like) v = static_cast<int64_t>(va_arg(ap, ptrdiff_t));
                else v = va_arg(ap, int);
                const char *sign = v < 0 ? "-" : spec.plus ? "+" : spec.space ? " " : "";
                const uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
                emit_unsigned(out, spec, mag, 10, false, sign);
                break;
            }
            case 'u':
            case 'x':
            case 'X':
            case 'o': {
                uint64_t v;
                if (longs >= 2) v = va_arg(ap, unsigned long long);
                else if (longs == 1) v = va_arg(ap, unsigned long);
                else if (size_like) v = va_arg(ap, size_t);
                else v = va_arg(ap, unsigned);
                const unsigned base = conv == 'u' ? 10 : conv == 'o' ? 8 : 16;
                emit_unsigned(out, spec, v, base, conv == 'X', "");
                break;
            }
            case 'p': {
                const uintptr_t v = reinterpret_cast<uintptr_t>(va_arg(ap, void *));
                emit_unsigned(out, spec, v, 16, false, "0x");
                break;
            }
            case 'c': {
                const char c = static_cast<char>(va_arg(ap, int));
                emit(out, spec, "", &c, 1);
                break;
            }
            case 's': {
                const char *s = va_arg(ap, const char *);
                if (s == nullptr) s = "(null)";
                size_t n = 0;
                while (s[n] && (spec.precision < 0 || n < static_cast<size_t>(spec.precision))) ++n;
                spec.zero = false;
                emit(out, spec, "", s, n);
                break;
            }
            case 'f':
            case 'F':
            case 'e':
            case 'E':
            case 'g':
            case 'G':
                emit_float(out, spec, va_arg(ap, double), conv);
                break;
            case '%':
                out.put('%');
                break;
            default:  // unknown: print it as it was written
                out.put('%');
                out.put(conv);
                break;
        }
    }
    if (cap > 0) {
        buf[out.len < cap ? out.len : cap - 1] = '\0';
    }
    return static_cast<int>(out.len);
}

int format(char *buf, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int n = format(buf, cap, fmt, ap);
    va_end(ap);
    return n;
}

// "first; last", or the one message when they are the same.
static const char *first_and_last(const char *first, const char *last) {
    if (first[0] == '\0' || strcmp(first, last) == 0) {
        return last;
    }
    format(g_both, sizeof(g_both), "%s; %s", first, last);
    return g_both;
}

const char *last_log() { return first_and_last(g_first, g_last); }

void mark_log() {
    g_mark_first[0] = '\0';
    g_mark_last[0] = '\0';
}

const char *log_since_mark() { return first_and_last(g_mark_first, g_mark_last); }

}  // namespace mtflm

extern "C" {

// TFLM's log sink. A message may arrive in pieces; "\r\n" (MicroPrintf's
// terminator) completes it.
void DebugLog(const char *format, va_list args) {
    char piece[mtflm::kMaxReason];
    mtflm::format(piece, sizeof(piece), format, args);
    if (strcmp(piece, "\r\n") == 0 || strcmp(piece, "\n") == 0) {
        if (g_pending_len > 0) {
            memcpy(g_last, g_pending, g_pending_len + 1);
            memcpy(g_mark_last, g_pending, g_pending_len + 1);
            if (g_first[0] == '\0') {
                memcpy(g_first, g_pending, g_pending_len + 1);
            }
            if (g_mark_first[0] == '\0') {
                memcpy(g_mark_first, g_pending, g_pending_len + 1);
            }
        }
        g_pending_len = 0;
        g_pending[0] = '\0';
        return;
    }
    for (const char *s = piece; *s && g_pending_len + 1 < sizeof(g_pending); ++s) {
        if (*s != '\r' && *s != '\n') {
            g_pending[g_pending_len++] = *s;
        }
    }
    g_pending[g_pending_len] = '\0';
}

int DebugVsnprintf(char *buffer, size_t buf_size, const char *format, va_list vlist) {
    return mtflm::format(buffer, buf_size, format, vlist);
}

// C++ run time: the address identifying this module to __cxa_atexit (never
// called: TFLM is compiled with -fno-use-cxa-atexit, but libstdc++/newlib
// objects may still refer to it), and atexit itself (the runner never
// returns from main normally, so registered destructors would never run).
void *__dso_handle = &__dso_handle;
int atexit(void (*)(void)) { return 0; }
int __cxa_atexit(void (*)(void *), void *, void *) { return 0; }
// newlib's __libc_init_array/__libc_fini_array call these; rt/crt0.c runs
// the constructors itself, but keep the symbols for objects that name them.
void _init(void) {}
void _fini(void) {}

#if defined(__x86_64__)
// errno for musl's libc.a (the x86-64 runner's libm and string routines,
// tflm.mk). musl keeps errno in the thread descriptor, reached through %fs,
// which no one sets up in the emulator; defining both names here keeps musl's
// errno member out of the link. flatbuffers' string-to-integer conversion
// (strtoll, reached from flexbuffers in custom options) reads errno; musl's
// math functions never write it.
static int g_errno;
int *__errno_location(void) { return &g_errno; }
int *___errno_location(void) { return &g_errno; }

// The thread pointer. Debian builds musl with -fstack-protector-strong: a few
// of the members TFLM pulls in (sin, cos, sinf, cosf and their argument
// reduction, qsort, strtoll) read the stack canary at %fs:0x28, and FS's base
// is 0 in the emulator (a page fault at 0x28). The runner points FS at a
// static thread descriptor before any constructor of TFLM's runs: word 0 is
// the descriptor's own address (musl's and glibc's `self`), word 5 (offset
// 0x28) the canary, a constant (there is nothing to protect against here).
// Nothing else of it is read: tflm.mk refuses an ELF with any other %fs
// access or a system call. WRMSR to IA32_FS_BASE: the guest runs at CPL 0.
alignas(64) static uint64_t g_thread_descriptor[64];
__attribute__((constructor(101))) static void set_thread_pointer(void) {
    const uint64_t base = reinterpret_cast<uint64_t>(g_thread_descriptor);
    g_thread_descriptor[0] = base;
    g_thread_descriptor[5] = 0x6d656d7472616365ull;  // "memtrace"
    __asm__ volatile("wrmsr" ::"c"(0xC0000100u), "a"(static_cast<uint32_t>(base)),
                     "d"(static_cast<uint32_t>(base >> 32))
                     : "memory");
}
#endif

}  // extern "C"

namespace tflite {

// No clock in the emulator: the instruction count is memtrace's time. A
// tick rate of 0 tells MicroProfiler-style users that there is no timer
// (TicksToMs guards against the division by zero).
uint32_t ticks_per_second() { return 0; }
uint32_t GetCurrentTimeTicks() { return 0; }

}  // namespace tflite
