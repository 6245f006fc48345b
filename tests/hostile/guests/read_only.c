/* Stores into the read-only segment (a constant, the code of main), then
   the host asked to write there: SYS_READ of the features file into main's
   code must fail. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

const int table[4] = {1, 2, 3, 4};

int main(void)
{
    volatile int *t = (volatile int *)&table[1];
    *t = 7; /* RODATA_STORE */
    volatile uint16_t *code = (volatile uint16_t *)((uintptr_t)&main & ~1u);
    uint16_t was = *code;
    *code = was; /* CODE_STORE */
    int fd = open(":semihosting-features", O_RDONLY);
    int got = read(fd, (void *)((uintptr_t)&main & ~1u), 4); /* HOST_WRITE */
    printf("open %d, read into main %d\n", fd >= 0, got);
    return 0;
}
