/*
 * SPDX-License-Identifier: GPL-2.0-or-later
 *
 * memtrace's QEMU engine: a TCG plugin (plugin API version 4, QEMU 10) that
 * streams a guest's accesses to the address ranges memtrace traces, and each
 * store to memtrace_port with its value, to memtrace over a pipe, and obeys
 * memtrace's replies at each protocol command.
 *
 * This file implements QEMU's plugin API and is licensed like it, under the
 * GNU GPL version 2 or later (QEMU's COPYING). memtrace itself is a separate
 * program: it starts QEMU with this plugin and talks to it only through the
 * two file descriptors below (tracer/src/qemu/ is its side of the pipe).
 *
 * Arguments (-plugin libmemtrace-qemu.so,ARG,ARG...):
 *   out=FD          records to memtrace (required)
 *   in=FD           memtrace's replies (required)
 *   port=ADDR       memtrace_port (8 bytes; a store at +4 is a command)
 *   signal=LO:HI    memtrace_signal's code: its stores are made with the
 *                   registers at hand, so the record carries LR (the call)
 *   guard=LO:HI     the stack's guard page: a store there ends the run
 *   fault=ADDR      an exception handler's first instruction (up to 16):
 *                   entering one ends the run with the stacked PC and LR
 *   budget=N        instructions the guest may retire
 *
 * Records (32 bytes each, little-endian):
 *   u8 kind, u8 size, u16 zero, u32 address, u32 pc, u32 lr,
 *   u64 t (instructions retired before this one), u64 value
 * Kinds: LOAD 0, STORE 1 (in a traced range), PORT 2 (a store to the port;
 * at +4 the plugin then waits for replies), BUDGET 3, FAULT 4 (address = the
 * exception number, pc/lr = the stacked PC and LR, value = the SP), GUARD 5
 * (a store to the guard page), PROGRESS 6, DATA 7 (size 0; value = n, then
 * n bytes of memory follow), EXIT 8 (QEMU exits; value = its status).
 *
 * Replies (u32 words): READ addr len (answered by DATA), RANGES n lo hi ...
 * (the traced ranges from now on), CONTINUE, STOP (flush and end QEMU).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <glib.h>
#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

enum { K_LOAD, K_STORE, K_PORT, K_BUDGET, K_FAULT, K_GUARD, K_PROGRESS, K_DATA, K_EXIT };
enum { R_READ = 1, R_RANGES = 2, R_CONTINUE = 3, R_STOP = 4 };

#define MAX_RANGES 64
#define MAX_FAULTS 16
#define PROGRESS_EVERY (1ull << 24)
#define OUT_BYTES (1u << 16)

struct range {
    uint64_t lo, hi;
};

static int out_fd = -1, in_fd = -1;
static uint64_t port_lo = 1, port_hi = 0;
static uint64_t signal_lo = 1, signal_hi = 0;
static uint64_t guard_lo = 1, guard_hi = 0;
static uint64_t faults[MAX_FAULTS];
static int n_faults;
static uint64_t budget = UINT64_MAX;
static struct range ranges[MAX_RANGES];
static int n_ranges;
static bool stopped;

static struct qemu_plugin_scoreboard *board;
struct counters {
    uint64_t retired;       /* instructions of every block begun */
    uint64_t since_progress;
};
static qemu_plugin_u64 retired, since_progress;

static struct qemu_plugin_register *reg_sp, *reg_lr, *reg_xpsr;

static uint8_t out_buf[OUT_BYTES];
static size_t out_len;

static void write_all(const void *data, size_t n) {
    const uint8_t *p = data;
    while (n > 0 && out_fd >= 0) {
        ssize_t w = write(out_fd, p, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            /* memtrace has gone: nothing is left to report to. */
            _exit(3);
        }
        p += w;
        n -= (size_t)w;
    }
}

static void flush_out(void) {
    write_all(out_buf, out_len);
    out_len = 0;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; ++i) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static void put_u64(uint8_t *p, uint64_t v) {
    put_u32(p, (uint32_t)v);
    put_u32(p + 4, (uint32_t)(v >> 32));
}

static void record(int kind, unsigned size, uint64_t address, uint64_t pc, uint64_t lr, uint64_t t,
                   uint64_t value) {
    if (out_len + 32 > OUT_BYTES) {
        flush_out();
    }
    uint8_t *r = out_buf + out_len;
    r[0] = (uint8_t)kind;
    r[1] = (uint8_t)size;
    r[2] = r[3] = 0;
    put_u32(r + 4, (uint32_t)address);
    put_u32(r + 8, (uint32_t)pc);
    put_u32(r + 12, (uint32_t)lr);
    put_u64(r + 16, t);
    put_u64(r + 24, value);
    out_len += 32;
}

static bool read_u32(uint32_t *v) {
    uint8_t b[4];
    size_t got = 0;
    while (got < 4) {
        ssize_t r = read(in_fd, b + got, 4 - got);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return false;
        }
        got += (size_t)r;
    }
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return true;
}

static void end_qemu(int status) {
    stopped = true;
    record(K_EXIT, 0, 0, 0, 0, qemu_plugin_u64_get(retired, 0), (uint64_t)status);
    flush_out();
    exit(status);
}

static uint64_t read_reg(struct qemu_plugin_register *reg) {
    if (!reg) {
        return 0;
    }
    GByteArray *buf = g_byte_array_new();
    uint64_t v = 0;
    int n = qemu_plugin_read_register(reg, buf);
    for (int i = 0; i < n && i < 8; ++i) {
        v |= (uint64_t)buf->data[i] << (8 * i);
    }
    g_byte_array_free(buf, TRUE);
    return v;
}

static void send_memory(uint32_t address, uint32_t len) {
    GByteArray *buf = g_byte_array_new();
    bool ok = len > 0 && qemu_plugin_read_memory_vaddr(address, buf, len);
    uint32_t n = ok ? len : 0;
    record(K_DATA, 0, address, 0, 0, 0, n);
    flush_out();
    if (n > 0) {
        write_all(buf->data, n);
    }
    g_byte_array_free(buf, TRUE);
}

/* Obeys memtrace until it says to go on; a STOP, or a closed pipe, ends QEMU. */
static void serve_replies(void) {
    flush_out();
    for (;;) {
        uint32_t op, a, b;
        if (!read_u32(&op)) {
            end_qemu(0);
        }
        switch (op) {
        case R_READ:
            if (!read_u32(&a) || !read_u32(&b)) {
                end_qemu(0);
            }
            send_memory(a, b);
            break;
        case R_RANGES:
            if (!read_u32(&a)) {
                end_qemu(0);
            }
            n_ranges = 0;
            for (uint32_t i = 0; i < a; ++i) {
                uint32_t lo, hi;
                if (!read_u32(&lo) || !read_u32(&hi)) {
                    end_qemu(0);
                }
                if (n_ranges < MAX_RANGES) {
                    ranges[n_ranges].lo = lo;
                    ranges[n_ranges].hi = hi;
                    ++n_ranges;
                }
            }
            break;
        case R_CONTINUE:
            return;
        default:
            end_qemu(0);
        }
    }
}

/* Instructions retired before the one now running: each instruction adds
 * one as it begins (per instruction, not per block, so that a block left
 * early — a store to the System Control Block ends it — is not counted
 * whole). */
static uint64_t now(void) {
    return qemu_plugin_u64_get(retired, 0) - 1;
}

static bool traced(uint64_t address, unsigned size) {
    for (int i = 0; i < n_ranges; ++i) {
        if (address < ranges[i].hi && ranges[i].lo < address + size) {
            return true;
        }
    }
    return false;
}

static void on_access(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata) {
    (void)vcpu;
    if (stopped) {
        return;
    }
    uint64_t pc = (uint64_t)(uintptr_t)udata;
    unsigned size = 1u << qemu_plugin_mem_size_shift(info);
    bool store = qemu_plugin_mem_is_store(info);
    bool in_signal = pc >= signal_lo && pc < signal_hi;
    if (store && vaddr >= port_lo && vaddr < port_hi) {
        qemu_plugin_mem_value v = qemu_plugin_mem_get_value(info);
        uint64_t value = v.type == QEMU_PLUGIN_MEM_VALUE_U32 ? v.data.u32 : v.data.u64;
        uint64_t lr = in_signal ? read_reg(reg_lr) : 0;
        record(K_PORT, size, vaddr, pc, lr, now(), value);
        if (vaddr - port_lo == 4) {
            serve_replies();
        }
        return;
    }
    if (store && vaddr < guard_hi && guard_lo < vaddr + size) {
        /* memtrace says whether it is the stack's (a STOP) or data that
         * shares the page (go on). */
        record(K_GUARD, size, vaddr, pc, 0, now(), read_reg(reg_sp));
        serve_replies();
    }
    if (traced(vaddr, size)) {
        record(store ? K_STORE : K_LOAD, size, vaddr, pc, 0, now(), 0);
    }
}

static void on_budget(unsigned int vcpu, void *udata) {
    (void)vcpu;
    (void)udata;
    if (!stopped) {
        record(K_BUDGET, 0, 0, 0, 0, qemu_plugin_u64_get(retired, 0), budget);
        end_qemu(0);
    }
}

static void on_progress(unsigned int vcpu, void *udata) {
    (void)udata;
    qemu_plugin_u64_set(since_progress, vcpu, 0);
    record(K_PROGRESS, 0, 0, 0, 0, qemu_plugin_u64_get(retired, 0), 0);
    flush_out();
}

/* An exception handler begins: the frame the core stacked holds the PC and
 * LR of the interrupted code (ARMv7-M/ARMv8-M basic frame). */
static void on_fault(unsigned int vcpu, void *udata) {
    (void)vcpu;
    (void)udata;
    if (stopped) {
        return;
    }
    uint64_t sp = read_reg(reg_sp), exception = read_reg(reg_xpsr) & 0x1ff;
    GByteArray *frame = g_byte_array_new();
    uint32_t pc = 0, lr = 0;
    if (qemu_plugin_read_memory_vaddr(sp, frame, 32)) {
        memcpy(&lr, frame->data + 20, 4);
        memcpy(&pc, frame->data + 24, 4);
    }
    g_byte_array_free(frame, TRUE);
    record(K_FAULT, 0, exception, pc, lr, qemu_plugin_u64_get(retired, 0), sp);
    serve_replies();
    end_qemu(0);
}

static bool is_fault_handler(uint64_t vaddr) {
    for (int i = 0; i < n_faults; ++i) {
        if ((faults[i] & ~1ull) == vaddr) {
            return true;
        }
    }
    return false;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(tb, QEMU_PLUGIN_INLINE_ADD_U64, since_progress, n);
    qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, on_budget, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_GT,
                                              retired, budget, NULL);
    qemu_plugin_register_vcpu_tb_exec_cond_cb(tb, on_progress, QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_COND_GE,
                                              since_progress, PROGRESS_EVERY, NULL);
    for (size_t i = 0; i < n; ++i) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint64_t pc = qemu_plugin_insn_vaddr(insn);
        bool in_signal = pc >= signal_lo && pc < signal_hi;
        qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(insn, QEMU_PLUGIN_INLINE_ADD_U64, retired, 1);
        qemu_plugin_register_vcpu_mem_cb(insn, on_access, in_signal ? QEMU_PLUGIN_CB_R_REGS : QEMU_PLUGIN_CB_NO_REGS,
                                         QEMU_PLUGIN_MEM_RW, (void *)(uintptr_t)pc);
        if (i == 0 && is_fault_handler(pc)) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_fault, QEMU_PLUGIN_CB_R_REGS, NULL);
        }
    }
}

static void on_vcpu_init(qemu_plugin_id_t id, unsigned int vcpu) {
    (void)id;
    (void)vcpu;
    GArray *regs = qemu_plugin_get_registers();
    for (guint i = 0; regs && i < regs->len; ++i) {
        qemu_plugin_reg_descriptor *d = &g_array_index(regs, qemu_plugin_reg_descriptor, i);
        if (strcmp(d->name, "sp") == 0) {
            reg_sp = d->handle;
        } else if (strcmp(d->name, "lr") == 0) {
            reg_lr = d->handle;
        } else if (strcmp(d->name, "xpsr") == 0) {
            reg_xpsr = d->handle;
        }
    }
    if (regs) {
        g_array_free(regs, TRUE);
    }
}

static void on_qemu_exit(qemu_plugin_id_t id, void *udata) {
    (void)id;
    (void)udata;
    if (!stopped) {
        stopped = true;
        record(K_EXIT, 0, 0, 0, 0, qemu_plugin_u64_get(retired, 0), 0);
        flush_out();
    }
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

static bool parse_range(const char *s, uint64_t *lo, uint64_t *hi) {
    char first[32];
    const char *colon = strchr(s, ':');
    size_t len = colon ? (size_t)(colon - s) : 0;
    if (!colon || len == 0 || len >= sizeof first) {
        return false;
    }
    memcpy(first, s, len);
    first[len] = '\0';
    return parse_u64(first, lo) && parse_u64(colon + 1, hi) && *lo < *hi;
}

static bool parse_arg(const char *arg) {
    uint64_t v;
    if (strncmp(arg, "out=", 4) == 0 && parse_u64(arg + 4, &v)) {
        out_fd = (int)v;
    } else if (strncmp(arg, "in=", 3) == 0 && parse_u64(arg + 3, &v)) {
        in_fd = (int)v;
    } else if (strncmp(arg, "port=", 5) == 0 && parse_u64(arg + 5, &v)) {
        port_lo = v;
        port_hi = v + 8;
    } else if (strncmp(arg, "signal=", 7) == 0) {
        return parse_range(arg + 7, &signal_lo, &signal_hi);
    } else if (strncmp(arg, "guard=", 6) == 0) {
        return parse_range(arg + 6, &guard_lo, &guard_hi);
    } else if (strncmp(arg, "fault=", 6) == 0 && parse_u64(arg + 6, &v) && n_faults < MAX_FAULTS) {
        faults[n_faults++] = v;
    } else if (strncmp(arg, "budget=", 7) == 0 && parse_u64(arg + 7, &v)) {
        budget = v;
    } else {
        return false;
    }
    return true;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                           char **argv) {
    if (info->system_emulation == false) {
        fprintf(stderr, "memtrace-qemu: system emulation only\n");
        return -1;
    }
    for (int i = 0; i < argc; ++i) {
        if (!parse_arg(argv[i])) {
            fprintf(stderr, "memtrace-qemu: bad argument %s\n", argv[i]);
            return -1;
        }
    }
    if (out_fd < 0 || in_fd < 0) {
        fprintf(stderr, "memtrace-qemu: out=FD and in=FD are required\n");
        return -1;
    }
    board = qemu_plugin_scoreboard_new(sizeof(struct counters));
    retired = qemu_plugin_scoreboard_u64_in_struct(board, struct counters, retired);
    since_progress = qemu_plugin_scoreboard_u64_in_struct(board, struct counters, since_progress);
    qemu_plugin_register_vcpu_init_cb(id, on_vcpu_init);
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_qemu_exit, NULL);
    return 0;
}
