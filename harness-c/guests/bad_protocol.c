/*
 * bad-protocol.elf — issues LAYER_END without a LAYER_BEGIN: the tracer must
 * reject it (protocol error naming the guest PC), not panic.
 */
#include "memtrace.h"

int main(void) {
    memtrace_layer_end();
    return 0;
}
