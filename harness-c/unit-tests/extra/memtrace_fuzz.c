/*
 * The program of the seeded `check` campaign (tests/fuzz_campaign/
 * programs.rs): its command line is a list of steps, each a letter and its
 * numbers, run in order. The campaign draws the steps, knows which of them
 * are defects (an overrun, a use after free, a calloc whose product wraps, a
 * host write into code, a loop that never ends ...) and checks that
 * `memtrace check` reports every defect and nothing on a run without one.
 *
 *   m S N      slot S = malloc(N)
 *   c S N M    slot S = calloc(N, M)
 *   r S N      slot S = realloc(slot S, N)
 *   f S        free(slot S)
 *   w S O L    memset(slot S + O, 0x5a, L)
 *   l S O L    read L bytes at slot S + O (their sum is printed)
 *   o N        N times: SYS_OPEN ":tt", then SYS_CLOSE it
 *   O N        N times: SYS_OPEN ":tt" (never closed)
 *   W S L      SYS_WRITE L bytes of slot S to the console
 *   R S L      SYS_READ L bytes of the features file into slot S
 *   C L        SYS_READ L bytes of the features file into main's code
 *   p L        arm_reshape_s8 of L bytes (the arrays hold 64)
 *   q L        arm_relu_q7 in place over L bytes (the array holds 64)
 *   d N        recursion N deep, 64 bytes of stack each
 *   x          an endless `b .`
 *   j S        a call of slot S's block (the heap is data, not code)
 *   J A        a call of address A
 *   e N        exit(N)
 *
 * Numbers are C literals (strtoul base 0). Exits 0 after the last step.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arm_nnfunctions.h"

#define SLOTS 8

static uint8_t *slot[SLOTS];
int8_t reshape_in[64];
int8_t reshape_out[64];
int8_t relu_data[64];

/* One Arm semihosting call: operation `op`, parameter block `arg`. */
static int semihost(int op, void *arg)
{
    register int r0 __asm__("r0") = op;
    register void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

static int sh_open(const char *name, int mode)
{
    uint32_t block[3] = {(uint32_t)name, (uint32_t)mode, (uint32_t)strlen(name)};
    return semihost(0x01, block);
}

static void sh_close(int handle)
{
    uint32_t block[1] = {(uint32_t)handle};
    semihost(0x02, block);
}

static int sh_rw(int op, int handle, void *buffer, uint32_t length)
{
    uint32_t block[3] = {(uint32_t)handle, (uint32_t)buffer, length};
    return semihost(op, block);
}

/* Recursion whose frames the compiler cannot fold away. */
static int __attribute__((noinline)) deep(uint32_t n)
{
    volatile uint8_t frame[64];
    frame[0] = (uint8_t)n;
    if (n == 0) {
        return frame[0];
    }
    return deep(n - 1) + frame[0];
}

static void __attribute__((noinline)) forever(void)
{
    __asm__ volatile("1: b 1b");
}

static unsigned long number(char **argv, int argc, int *i)
{
    if (*i >= argc) {
        return 0;
    }
    return strtoul(argv[(*i)++], NULL, 0);
}

int main(int argc, char **argv)
{
    int i = 1;
    while (i < argc) {
        char step = argv[i++][0];
        unsigned long a = 0, b = 0, c = 0;
        switch (step) {
        case 'm':
            a = number(argv, argc, &i) % SLOTS;
            b = number(argv, argc, &i);
            slot[a] = malloc(b);
            break;
        case 'c':
            a = number(argv, argc, &i) % SLOTS;
            b = number(argv, argc, &i);
            c = number(argv, argc, &i);
            slot[a] = calloc(b, c);
            break;
        case 'r':
            a = number(argv, argc, &i) % SLOTS;
            b = number(argv, argc, &i);
            slot[a] = realloc(slot[a], b);
            break;
        case 'f':
            a = number(argv, argc, &i) % SLOTS;
            free(slot[a]);
            break;
        case 'w':
            a = number(argv, argc, &i) % SLOTS;
            b = number(argv, argc, &i);
            c = number(argv, argc, &i);
            if (slot[a]) {
                memset(slot[a] + b, 0x5a, c);
            }
            break;
        case 'l': {
            a = number(argv, argc, &i) % SLOTS;
            b = number(argv, argc, &i);
            c = number(argv, argc, &i);
            unsigned sum = 0;
            if (slot[a]) {
                const volatile uint8_t *p = slot[a] + b;
                for (unsigned long k = 0; k < c; k++) {
                    sum += p[k];
                }
            }
            printf("sum %u\n", sum);
            break;
        }
        case 'o':
        case 'O':
            a = number(argv, argc, &i);
            for (unsigned long k = 0; k < a; k++) {
                int h = sh_open(":tt", 0);
                if (step == 'o') {
                    sh_close(h);
                }
            }
            break;
        case 'W': {
            a = number(argv, argc, &i) % SLOTS;
            b = number(argv, argc, &i);
            int h = sh_open(":tt", 4);
            sh_rw(0x05, h, slot[a], b);
            sh_close(h);
            break;
        }
        case 'R':
        case 'C': {
            uint8_t *to;
            if (step == 'R') {
                a = number(argv, argc, &i) % SLOTS;
                to = slot[a];
            } else {
                to = (uint8_t *)((uintptr_t)&main & ~(uintptr_t)1);
            }
            b = number(argv, argc, &i);
            int h = sh_open(":semihosting-features", 0);
            sh_rw(0x06, h, to, b);
            sh_close(h);
            break;
        }
        case 'p':
            a = number(argv, argc, &i);
            arm_reshape_s8(reshape_in, reshape_out, (int32_t)a);
            break;
        case 'q':
            a = number(argv, argc, &i);
            arm_relu_q7(relu_data, (uint16_t)a);
            break;
        case 'd':
            a = number(argv, argc, &i);
            printf("deep %d\n", deep(a));
            break;
        case 'x':
            forever();
            break;
        case 'j':
        case 'J': {
            a = number(argv, argc, &i);
            uintptr_t to = step == 'j' ? (uintptr_t)slot[a % SLOTS] : (uintptr_t)a;
            void (*target)(void) = (void (*)(void))to;
            target();
            break;
        }
        case 'e':
            exit((int)number(argv, argc, &i));
        default:
            printf("unknown step %c\n", step);
            return 2;
        }
    }
    return 0;
}
