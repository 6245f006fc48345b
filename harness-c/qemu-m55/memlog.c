/*
 * memlog — a QEMU TCG plugin (plugin API version 1, as in QEMU 7.2) that
 * writes every guest load and store inside given address ranges to a file,
 * in program order, with the address of the instruction that made it.
 *
 * Written for memtrace's Cortex-M55 route (qemu-m55/README.md): QEMU runs a
 * memtrace guest built with Helium (MVE) on the mps3-an547 machine, and
 * scripts/m55-overlap.py turns this log into each layer's O_s.
 *
 * Arguments (-plugin libmemlog.so,ARG,ARG...):
 *   out=FILE        the log (required): 12-byte little-endian records
 *                   { u32 address; u32 pc; u16 size; u8 store; u8 zero }
 *   range=LO:HI     log accesses whose address is in [LO, HI) (hex or
 *                   decimal; up to 8 ranges; none given: log everything)
 *   stop=on|off     end QEMU when the guest branches to itself (`b .`, the
 *                   idle loop every memtrace exit path ends in); default on
 *
 * A vector or multi-register instruction reaches the plugin as one record
 * per element QEMU accesses (e.g. VLDRB.8 as sixteen 1-byte loads; a lane
 * that tail predication switches off makes no access). At exit the plugin
 * prints one line to stderr:
 *   memlog: INSNS instructions, LOGGED accesses logged of SEEN
 * (instructions counted per executed translation block).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define MEMLOG_MAX_RANGES 8

struct memlog_range {
    uint64_t lo, hi;
};

static struct memlog_range ranges[MEMLOG_MAX_RANGES];
static int n_ranges;
static FILE *log_file;
static bool stop_on_self_loop = true;
static bool finished;
static uint64_t insn_count;   /* updated inline by the translated code */
static uint64_t seen_count;   /* accesses the callback saw */
static uint64_t logged_count; /* of them, inside a range */

static void memlog_finish(void) {
    if (finished) {
        return;
    }
    finished = true;
    if (log_file) {
        fflush(log_file);
        fclose(log_file);
        log_file = NULL;
    }
    fprintf(stderr, "memlog: %" PRIu64 " instructions, %" PRIu64 " accesses logged of %" PRIu64 "\n",
            insn_count, logged_count, seen_count);
    fflush(stderr);
}

static void on_access(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *pc) {
    (void)vcpu;
    ++seen_count;
    if (n_ranges > 0) {
        bool inside = false;
        for (int i = 0; i < n_ranges && !inside; ++i) {
            inside = vaddr >= ranges[i].lo && vaddr < ranges[i].hi;
        }
        if (!inside) {
            return;
        }
    }
    uint8_t rec[12];
    uint32_t a = (uint32_t)vaddr, p = (uint32_t)(uintptr_t)pc;
    uint16_t size = (uint16_t)(1u << qemu_plugin_mem_size_shift(info));
    for (int i = 0; i < 4; ++i) {
        rec[i] = (uint8_t)(a >> (8 * i));
        rec[4 + i] = (uint8_t)(p >> (8 * i));
    }
    rec[8] = (uint8_t)size;
    rec[9] = (uint8_t)(size >> 8);
    rec[10] = qemu_plugin_mem_is_store(info) ? 1 : 0;
    rec[11] = 0;
    if (log_file && fwrite(rec, sizeof rec, 1, log_file) == 1) {
        ++logged_count;
    }
}

static void on_self_loop(unsigned int vcpu, void *userdata) {
    (void)vcpu;
    (void)userdata;
    memlog_finish();
    exit(0);
}

/* Thumb `b .`: B (T2) with offset -4 is 0xe7fe; B.W (T4) with offset -4 is
 * 0xf7ff 0xbffe. */
static bool is_self_branch(const struct qemu_plugin_insn *insn) {
    const uint8_t *d = qemu_plugin_insn_data(insn);
    size_t n = qemu_plugin_insn_size(insn);
    if (n == 2) {
        return d[0] == 0xfe && d[1] == 0xe7;
    }
    if (n == 4) {
        return d[0] == 0xff && d[1] == 0xf7 && d[2] == 0xfe && d[3] == 0xbf;
    }
    return false;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &insn_count, n);
    for (size_t i = 0; i < n; ++i) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        void *pc = (void *)(uintptr_t)qemu_plugin_insn_vaddr(insn);
        qemu_plugin_register_vcpu_mem_cb(insn, on_access, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_MEM_RW, pc);
        if (stop_on_self_loop && is_self_branch(insn)) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_self_loop, QEMU_PLUGIN_CB_NO_REGS, NULL);
        }
    }
}

static void on_plugin_exit(qemu_plugin_id_t id, void *userdata) {
    (void)id;
    (void)userdata;
    memlog_finish();
}

static bool parse_u64(const char *s, uint64_t *v) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 0);
    if (errno || end == s || *end) {
        return false;
    }
    *v = x;
    return true;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                           char **argv) {
    const char *out = NULL;
    (void)info;
    for (int i = 0; i < argc; ++i) {
        const char *arg = argv[i];
        if (strncmp(arg, "out=", 4) == 0) {
            out = arg + 4;
        } else if (strncmp(arg, "range=", 6) == 0) {
            char lo[64];
            const char *colon = strchr(arg + 6, ':');
            size_t len = colon ? (size_t)(colon - (arg + 6)) : 0;
            if (!colon || len == 0 || len >= sizeof lo || n_ranges == MEMLOG_MAX_RANGES) {
                fprintf(stderr, "memlog: bad or too many range arguments: %s (LO:HI, at most %d)\n", arg,
                        MEMLOG_MAX_RANGES);
                return -1;
            }
            memcpy(lo, arg + 6, len);
            lo[len] = '\0';
            struct memlog_range r;
            if (!parse_u64(lo, &r.lo) || !parse_u64(colon + 1, &r.hi) || r.hi <= r.lo) {
                fprintf(stderr, "memlog: bad range %s\n", arg);
                return -1;
            }
            ranges[n_ranges++] = r;
        } else if (strncmp(arg, "stop=", 5) == 0) {
            if (!qemu_plugin_bool_parse("stop", arg + 5, &stop_on_self_loop)) {
                fprintf(stderr, "memlog: bad boolean %s\n", arg);
                return -1;
            }
        } else {
            fprintf(stderr, "memlog: unknown argument %s\n", arg);
            return -1;
        }
    }
    if (!out) {
        fprintf(stderr, "memlog: out=FILE is required\n");
        return -1;
    }
    log_file = fopen(out, "wb");
    if (!log_file) {
        fprintf(stderr, "memlog: cannot open %s: %s\n", out, strerror(errno));
        return -1;
    }
    setvbuf(log_file, NULL, _IOFBF, 1 << 20);
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_plugin_exit, NULL);
    return 0;
}
