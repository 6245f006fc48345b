/* The host on the program's behalf: SYS_WRITE out of a freed block and out
   of one never written, SYS_READ into a freed block. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
    char *keep = malloc(64); /* keeps the freed blocks out of the top chunk */
    char *p = malloc(32);
    char *guard = malloc(32);
    memcpy(p, "hello from a freed block\n", 25);
    free(p);
    write(1, p, 25); /* WRITE_FREED */
    char *fresh = malloc(16);
    write(1, fresh, 8); /* WRITE_UNWRITTEN */
    char *q = malloc(48);
    char *guard2 = malloc(32);
    free(q);
    int fd = open(":semihosting-features", O_RDONLY);
    int got = read(fd, q, 4); /* READ_FREED */
    free(fresh);
    free(guard);
    free(guard2);
    free(keep);
    return got == 4 ? 0 : 3;
}
