/* A small, correct user of the heap: a list built, summed and freed. */
#include <stdio.h>
#include <stdlib.h>

struct node {
    struct node *next;
    int value;
};

int main(void)
{
    struct node *head = 0;
    for (int i = 1; i <= 10; i++) {
        struct node *n = malloc(sizeof *n);
        if (!n)
            return 2;
        n->value = i;
        n->next = head;
        head = n;
    }
    int sum = 0;
    while (head) {
        struct node *next = head->next;
        sum += head->value;
        free(head);
        head = next;
    }
    printf("sum %d\n", sum);
    return sum == 55 ? 0 : 1;
}
