/* A hostile semihosting loop: `sh_loop OP W0 W1 W2 ITERATIONS` makes the
   semihosting call OP ITERATIONS times with the parameter block W0 W1 W2
   (for the calls that take a value, r1 is W0 itself), then prints how many
   calls were made and their first and last results.

   A word is a number (strtoul) or a place: code (main's code), rodata (a
   constant), freed (a freed 64-byte block), live (a written one), fresh
   (one never written), unmapped, stack (a written stack buffer), tt and
   features (the console's and the features file's names), out, in and
   feat (handles on stdout, stdin and the features file). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int semihost(int op, void *arg)
{
    register int r0 __asm__("r0") = op;
    register void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

int main(int argc, char **argv);

static const char rodata[64] = "constant bytes the program must not write";
static const char tt[] = ":tt";
static const char features[] = ":semihosting-features";

static int open_name(const char *name, uint32_t mode)
{
    uint32_t block[3] = {(uint32_t)name, mode, strlen(name)};
    return semihost(0x01, block);
}

static uint32_t word(const char *w, char *freed, char *live, char *fresh, char *stack,
                     const int handles[3])
{
    if (!strcmp(w, "code"))
        return (uint32_t)&main & ~1u;
    if (!strcmp(w, "rodata"))
        return (uint32_t)rodata;
    if (!strcmp(w, "freed"))
        return (uint32_t)freed;
    if (!strcmp(w, "live"))
        return (uint32_t)live;
    if (!strcmp(w, "fresh"))
        return (uint32_t)fresh;
    if (!strcmp(w, "unmapped"))
        return 0xF0000000u;
    if (!strcmp(w, "stack"))
        return (uint32_t)stack;
    if (!strcmp(w, "tt"))
        return (uint32_t)tt;
    if (!strcmp(w, "features"))
        return (uint32_t)features;
    if (!strcmp(w, "out"))
        return handles[0];
    if (!strcmp(w, "in"))
        return handles[1];
    if (!strcmp(w, "feat"))
        return handles[2];
    return strtoul(w, 0, 0);
}

/* The calls whose r1 is a value (or points at the data itself), not at a
   parameter block. */
static int takes_value(int op)
{
    return op == 0x03 || op == 0x04 || op == 0x10 || op == 0x11 || op == 0x13 ||
           op == 0x30 || op == 0x31;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        printf("usage: sh_loop OP W0 W1 W2 ITERATIONS\n");
        return 2;
    }
    char *before = malloc(64);
    char *freed = malloc(64);
    char *after = malloc(64);
    char *live = malloc(64);
    char *fresh = malloc(64);
    memset(freed, 'f', 64);
    memset(live, 'l', 63);
    live[63] = 0;
    free(freed);
    char stack[64];
    memset(stack, 's', 63);
    stack[63] = 0;
    int handles[3] = {open_name(tt, 4), open_name(tt, 0), open_name(features, 0)};
    int op = strtoul(argv[1], 0, 0);
    uint32_t block[4] = {0};
    for (int i = 0; i < 3; i++)
        block[i] = word(argv[2 + i], freed, live, fresh, stack, handles);
    unsigned long n = strtoul(argv[5], 0, 0);
    void *arg = takes_value(op) ? (void *)block[0] : (void *)block;
    int first = 0, last = 0;
    for (unsigned long i = 0; i < n; i++) {
        last = semihost(op, arg);
        if (i == 0)
            first = last;
    }
    printf("\nsh_loop: %lu calls, first %d, last %d\n", n, first, last);
    free(before);
    free(after);
    free(live);
    free(fresh);
    return 0;
}
