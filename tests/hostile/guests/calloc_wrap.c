/* calloc(n, m) whose product needs 33 bits: newlib multiplies in 32 bits,
   so the product wraps and the block it returns is that small (16 B).
   The store after its end is an overrun memcheck must see. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    volatile uint32_t n = 0x10000001u, m = 16;
    char *p = calloc(n, m); /* CALLOC_CALL */
    printf("calloc(%lu, %lu) returned %s\n", (unsigned long)n, (unsigned long)m,
           p ? "a block" : "NULL");
    if (!p)
        return 2;
    p[15] = 1;
    p[16] = 2; /* CALLOC_OVERRUN: 0 B past the end of the 16-byte block */
    free(p);
    return 0;
}
