/* Prints its argument count and the length of its command line. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    size_t bytes = 0;
    for (int i = 0; i < argc; i++)
        bytes += strlen(argv[i]) + (i > 0);
    printf("argc %d, %u bytes\n", argc, (unsigned)bytes);
    return 0;
}
