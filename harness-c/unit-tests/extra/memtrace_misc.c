/*
 * The CMSIS-NN v7.0.0 functions no unit-test suite of the release calls:
 * arm_concatenation_s8_{x,y,z,w}, arm_reshape_s8, arm_relu_q7,
 * arm_relu6_s8 and arm_relu_q15, each called on small known tensors and
 * its output checked here. `memtrace check` runs it as a program
 * (tests/libraries/check_misc.rs): one layer per call, in this order:
 *
 *   concat_x a, b; concat_y a, b; concat_z a, b; concat_w a, b;
 *   reshape; relu_q7; relu6_s8; relu_q15.
 *
 * Every array is a global so that its size is in the symbol table
 * (arm-none-eabi-nm -S), where the test reads it. Prints one line per
 * check and exits 0 when all hold, 1 otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "arm_nnfunctions.h"

/* Extents are (x, y, z, w): x varies fastest, then y, z, w. */
enum { X, Y, Z, W };

/* Concatenation along X: inputs 2 and 3 wide, 3 high, 2 channels, 2 batches. */
int8_t concat_x_a[2 * 3 * 2 * 2];
int8_t concat_x_b[3 * 3 * 2 * 2];
int8_t concat_x_out[5 * 3 * 2 * 2];
/* Along Y: 3 wide, 1 and 2 high, 2 channels, 2 batches. */
int8_t concat_y_a[3 * 1 * 2 * 2];
int8_t concat_y_b[3 * 2 * 2 * 2];
int8_t concat_y_out[3 * 3 * 2 * 2];
/* Along Z: 2 wide, 2 high, 3 and 1 channels, 2 batches. */
int8_t concat_z_a[2 * 2 * 3 * 2];
int8_t concat_z_b[2 * 2 * 1 * 2];
int8_t concat_z_out[2 * 2 * 4 * 2];
/* Along W: 2 wide, 3 high, 2 channels, 1 and 2 batches. */
int8_t concat_w_a[2 * 3 * 2 * 1];
int8_t concat_w_b[2 * 3 * 2 * 2];
int8_t concat_w_out[2 * 3 * 2 * 3];

int8_t reshape_in[20];
int8_t reshape_out[20];

/* In place; the last element of each is negative, so every kernel writes it. */
int8_t relu_q7_data[11] = {-5, 3, -128, 127, 0, -1, 6, 7, -9, 2, -3};
int8_t relu6_s8_data[9] = {-5, 3, -128, 127, 0, 6, 7, 5, -1};
int16_t relu_q15_data[7] = {-300, 200, -32768, 32767, 0, 5, -7};

static int failures;

/* Reports one check. */
static void verdict(const char *what, int ok)
{
    printf("memtrace_misc: %s %s\n", what, ok ? "ok" : "FAILED");
    failures += !ok;
}

/* Fills `n` bytes with a pattern that differs per array (`tag`). */
static void fill(int8_t *data, int n, int tag)
{
    for (int i = 0; i < n; i++)
    {
        data[i] = (int8_t)(tag * 16 + i % 13 - 64);
    }
}

/* The flat index of element `c` of a tensor of extents `e`. */
static int flat(const int c[4], const int e[4])
{
    return ((c[W] * e[Z] + c[Z]) * e[Y] + c[Y]) * e[X] + c[X];
}

/*
 * Whether `out` (extents `a` with the axis's extent `a[axis] + b[axis]`)
 * holds `in_a` then `in_b` along `axis`, element by element.
 */
static int concatenated(const int8_t *out, int axis, const int a[4], const int b[4], const int8_t *in_a,
                        const int8_t *in_b)
{
    int e[4] = {a[X], a[Y], a[Z], a[W]};
    e[axis] = a[axis] + b[axis];
    int c[4];
    for (c[W] = 0; c[W] < e[W]; c[W]++)
        for (c[Z] = 0; c[Z] < e[Z]; c[Z]++)
            for (c[Y] = 0; c[Y] < e[Y]; c[Y]++)
                for (c[X] = 0; c[X] < e[X]; c[X]++)
                {
                    int from[4] = {c[X], c[Y], c[Z], c[W]};
                    int8_t want;
                    if (c[axis] < a[axis])
                    {
                        want = in_a[flat(from, a)];
                    }
                    else
                    {
                        from[axis] -= a[axis];
                        want = in_b[flat(from, b)];
                    }
                    if (out[flat(c, e)] != want)
                        return 0;
                }
    return 1;
}

/* Concatenates `in_a` and `in_b` along `axis` with CMSIS-NN and checks it. */
static void concat(const char *what, int axis, const int a[4], const int b[4], int8_t *in_a, int8_t *in_b,
                   int8_t *out)
{
    const int total = a[axis] + b[axis];
    fill(in_a, a[X] * a[Y] * a[Z] * a[W], 1 + 2 * axis);
    fill(in_b, b[X] * b[Y] * b[Z] * b[W], 2 + 2 * axis);
    const int8_t *ins[2] = {in_a, in_b};
    const int *dims[2] = {a, b};
    uint32_t offset = 0;
    for (int i = 0; i < 2; i++)
    {
        const int *d = dims[i];
        switch (axis)
        {
        case X:
            arm_concatenation_s8_x(ins[i], d[X], d[Y], d[Z], d[W], out, total, offset);
            break;
        case Y:
            arm_concatenation_s8_y(ins[i], d[X], d[Y], d[Z], d[W], out, total, offset);
            break;
        case Z:
            arm_concatenation_s8_z(ins[i], d[X], d[Y], d[Z], d[W], out, total, offset);
            break;
        default:
            arm_concatenation_s8_w(ins[i], d[X], d[Y], d[Z], d[W], out, offset);
            break;
        }
        offset += d[axis];
    }
    verdict(what, concatenated(out, axis, a, b, in_a, in_b));
}

/* Whether `data` holds `before` clamped to [0, top] (top < 0: no top). */
static int clamped8(const int8_t *data, const int8_t *before, int n, int top)
{
    for (int i = 0; i < n; i++)
    {
        int want = before[i] < 0 ? 0 : before[i];
        if (top >= 0 && want > top)
            want = top;
        if (data[i] != want)
            return 0;
    }
    return 1;
}

static void relus(void)
{
    int8_t q7[sizeof relu_q7_data], six[sizeof relu6_s8_data];
    memcpy(q7, relu_q7_data, sizeof q7);
    memcpy(six, relu6_s8_data, sizeof six);
    arm_relu_q7(relu_q7_data, sizeof relu_q7_data);
    verdict("relu_q7", clamped8(relu_q7_data, q7, sizeof q7, -1));
    arm_relu6_s8(relu6_s8_data, sizeof relu6_s8_data);
    verdict("relu6_s8", clamped8(relu6_s8_data, six, sizeof six, 6));

    static const int16_t want[7] = {0, 200, 0, 32767, 0, 5, 0};
    arm_relu_q15(relu_q15_data, sizeof relu_q15_data / sizeof relu_q15_data[0]);
    verdict("relu_q15", memcmp(relu_q15_data, want, sizeof want) == 0);
}

int main(void)
{
    static const int xa[4] = {2, 3, 2, 2}, xb[4] = {3, 3, 2, 2};
    static const int ya[4] = {3, 1, 2, 2}, yb[4] = {3, 2, 2, 2};
    static const int za[4] = {2, 2, 3, 2}, zb[4] = {2, 2, 1, 2};
    static const int wa[4] = {2, 3, 2, 1}, wb[4] = {2, 3, 2, 2};
    concat("concatenation_s8_x", X, xa, xb, concat_x_a, concat_x_b, concat_x_out);
    concat("concatenation_s8_y", Y, ya, yb, concat_y_a, concat_y_b, concat_y_out);
    concat("concatenation_s8_z", Z, za, zb, concat_z_a, concat_z_b, concat_z_out);
    concat("concatenation_s8_w", W, wa, wb, concat_w_a, concat_w_b, concat_w_out);

    fill(reshape_in, sizeof reshape_in, 9);
    arm_reshape_s8(reshape_in, reshape_out, sizeof reshape_in);
    verdict("reshape_s8", memcmp(reshape_in, reshape_out, sizeof reshape_in) == 0);

    relus();
    printf("memtrace_misc: %s\n", failures ? "FAILED" : "all ok");
    return failures ? 1 : 0;
}
