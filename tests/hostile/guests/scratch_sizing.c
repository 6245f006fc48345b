/*
 * scratch_sizing.c: a kernel whose size function under-reports the scratch
 * it uses, as CMSIS-NN's did (docs/check.md, "Overruns"):
 *
 *   scratch_sizing LAYOUT SHORT
 *
 * The kernel (`arm_avgpool_s8`, a 1x1 average pool with CMSIS-NN's
 * signature, so `memtrace check` traces it as an API call) copies its
 * input through the scratch 64 bytes at a time with `memcpy`; the size
 * function says it needs 64 - SHORT bytes. LAYOUT `apart`: the scratch is
 * a heap block of its own, allocated just before the output's; `shared`:
 * one heap block holds the scratch, then the output. Exits 0 when the
 * output equals the input.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CMSIS-NN v7.0.0's structures (every field a 32-bit word). */
typedef struct { void *buf; int32_t size; } cmsis_nn_context;
typedef struct { int32_t n, h, w, c; } cmsis_nn_dims;
typedef struct { int32_t w, h; } cmsis_nn_tile;
typedef struct { int32_t min, max; } cmsis_nn_activation;
typedef struct {
    cmsis_nn_tile stride;
    cmsis_nn_tile padding;
    cmsis_nn_activation activation;
} cmsis_nn_pool_params;

#define CHUNK 64
#define BYTES 256

static int short_by;
static int8_t input[BYTES];

int32_t arm_avgpool_s8_get_buffer_size(const int dim_dst_width, const int ch_src)
{
    (void)dim_dst_width;
    (void)ch_src;
    return CHUNK - short_by;
}

int arm_avgpool_s8(const cmsis_nn_context *ctx, const cmsis_nn_pool_params *params,
                   const cmsis_nn_dims *input_dims, const int8_t *in,
                   const cmsis_nn_dims *filter_dims, const cmsis_nn_dims *output_dims,
                   int8_t *out)
{
    (void)params;
    (void)filter_dims;
    (void)output_dims;
    int8_t *scratch = ctx->buf;
    int32_t bytes = input_dims->h * input_dims->w * input_dims->c;
    for (int32_t off = 0; off < bytes; off += CHUNK) {
        memcpy(scratch, in + off, CHUNK); /* the copy into the scratch */
        for (int i = 0; i < CHUNK; i++)
            out[off + i] = scratch[i];
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        printf("usage: scratch_sizing apart|shared SHORT\n");
        return 2;
    }
    int shared = !strcmp(argv[1], "shared");
    short_by = atoi(argv[2]);
    for (int i = 0; i < BYTES; i++)
        input[i] = (int8_t)(i * 7 + 1);
    cmsis_nn_dims in_dims = {1, 8, 8, 4}, filter_dims = {1, 1, 1, 1}, out_dims = {1, 8, 8, 4};
    cmsis_nn_pool_params params = {{1, 1}, {0, 0}, {-128, 127}};
    int32_t size = arm_avgpool_s8_get_buffer_size(out_dims.w, in_dims.c);
    cmsis_nn_context ctx;
    int8_t *output;
    if (shared) {
        int8_t *block = malloc(size + BYTES); /* the shared block */
        ctx.buf = block;
        output = block + size;
    } else {
        ctx.buf = malloc(size); /* the scratch block */
        output = malloc(BYTES); /* the output block */
    }
    ctx.size = size;
    arm_avgpool_s8(&ctx, &params, &in_dims, input, &filter_dims, &out_dims, output); /* the call */
    int same = !memcmp(output, input, BYTES);
    printf("scratch_sizing: %s, scratch %ld B: output %s\n", argv[1], (long)size,
           same ? "ok" : "wrong");
    if (shared) {
        free(ctx.buf);
    } else {
        free(ctx.buf);
        free(output);
    }
    return same ? 0 : 1;
}
