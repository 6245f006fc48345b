/* Opens the console (SYS_OPEN of ":tt") argv[1] times and never closes it:
   past the host's handle limit each open must fail (-1, errno EMFILE). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int semihost(int op, void *arg)
{
    register int r0 __asm__("r0") = op;
    register void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

int main(int argc, char **argv)
{
    unsigned long n = argc > 1 ? strtoul(argv[1], 0, 0) : 1000;
    static const char tt[] = ":tt";
    uint32_t block[3] = {(uint32_t)tt, 4, 3};
    unsigned long opened = 0, failed = 0;
    int first_errno = 0;
    for (unsigned long i = 0; i < n; i++) {
        if (semihost(0x01, block) != -1) {
            opened++;
        } else if (failed++ == 0) {
            first_errno = semihost(0x13, 0);
        }
    }
    printf("opened %lu, failed %lu, errno %d\n", opened, failed, first_errno);
    return 0;
}
