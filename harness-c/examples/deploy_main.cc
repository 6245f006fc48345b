// deploy_main.cc — the firmware `main` of docs/deploy.md: TensorFlow Lite
// Micro on a model planned by memtrace, as a firmware writes it. Everything
// it needs of the model comes from the header `memtrace plan|verify
// --emit-offline OUT.tflite` wrote beside it (OUT.h): the model bytes, the
// arena to allocate and the operators to register.
//
// Build (Cortex-M4, TFLM from ../shared/third_party/tflm, the harness's
// run-time library):
//   make -C harness-c deploy-example HEADER=/path/OUT.h [DEPLOY_KERNELS=cmsis-nn]
// and run it in the emulator: memtrace run harness-c/build/cortex-m4/deploy-example.elf
//
// Exit codes: 0 ran (and, with an expected-output header, the outputs are
// byte-equal to it), 1 outputs differ, 2 AllocateTensors() failed, 3 Invoke()
// failed, 4 the model's inputs or outputs are not what the expected-output
// header says. TFLM's own last message is the exit reason.
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/schema/schema_generated.h"

// The header memtrace wrote: kModel, kTensorArenaSize, MEMTRACE_MODEL_OPS.
#ifndef MODEL_HEADER
#define MODEL_HEADER "model.h"
#endif
#include MODEL_HEADER

// Optional: an input to run and the outputs it must give (kInput,
// kInputSize, kExpectedOutput, kExpectedOutputSize), e.g. from PyPI
// tflite-micro on the host.
#ifdef EXPECTED_HEADER
#include EXPECTED_HEADER
#endif

// The arena TFLM plans into: exactly the size memtrace measured, aligned as
// it measured it.
#ifndef DEPLOY_ARENA_BYTES
#define DEPLOY_ARENA_BYTES kTensorArenaSize
#endif
alignas(16) static uint8_t tensor_arena[DEPLOY_ARENA_BYTES];

// --- platform: where TFLM's messages go ---------------------------------------
// A firmware prints them on its UART (MicroPrintf → DebugLog). In memtrace's
// emulator, the harness's TFLM platform file (harness-c/tflm/platform.cc)
// keeps the last one, and the exit reason carries it to `memtrace run`.
#include "memtrace.h"
namespace mtflm {
const char *last_log();
}

// The exit reason, built without printf (which would pull newlib's
// formatted output into the firmware).
static char reason[320];
static size_t reason_len;

static void say(const char *text) {
    for (const char *p = text; *p != '\0' && reason_len + 1 < sizeof(reason); ++p) {
        reason[reason_len++] = *p;
    }
    reason[reason_len] = '\0';
}

static void say_number(size_t v) {
    char digits[24];
    size_t k = 0;
    do {
        digits[k++] = static_cast<char>('0' + v % 10);
        v /= 10;
    } while (v != 0 && k < sizeof(digits));
    char one[2] = {0, 0};
    while (k > 0) {
        one[0] = digits[--k];
        say(one);
    }
}

// How the firmware ends. On memtrace's run-time library the exit reason
// goes to `memtrace run`; built as an ordinary semihosted program (`make
// deploy-check`, DEPLOY_SEMIHOSTED) main returns its code, the C library
// exits with it, and the reason is printed on the console.
#ifdef DEPLOY_SEMIHOSTED
#include <stdio.h>
static void leave(int code) {
    (void)code;
    puts(reason);
}
#else
static void leave(int code) { memtrace_exit_reason(code, reason); }
#endif

// A failure: what failed, and TFLM's last message.
static int finish(int code, const char *what) {
    const char *log = mtflm::last_log();
    say(what);
    if (log[0] != '\0') {
        say(": ");
        say(log);
    }
    leave(code);
    return code;
}

// A run that ended well (`memtrace run` prints it): the arena it ran in and
// what TFLM used of it.
static int ran_ok(size_t used) {
    say("AllocateTensors() and Invoke() OK in a ");
    say_number(sizeof(tensor_arena));
    say(" B arena (TFLM used ");
    say_number(used);
#ifdef EXPECTED_HEADER
    say(" B); outputs equal the expected outputs");
#else
    say(" B)");
#endif
    leave(0);
    return 0;
}

// --- the program ----------------------------------------------------------------
int main(void) {
    const tflite::Model *model = tflite::GetModel(kModel);
    if (model->version() != TFLITE_SCHEMA_VERSION) {
        return finish(4, "model schema version differs from TFLM's");
    }

    tflite::MicroMutableOpResolver<kModelOpCount> resolver;
#define ADD_OP(method) resolver.method();
    MEMTRACE_MODEL_OPS(ADD_OP)
#undef ADD_OP

    tflite::MicroInterpreter interpreter(model, resolver, tensor_arena, sizeof(tensor_arena));
    if (interpreter.AllocateTensors() != kTfLiteOk) {
        return finish(2, "AllocateTensors() failed");
    }

    // Fill the input (here: the expected-output header's, or zeros).
    size_t at = 0;
    for (size_t i = 0; i < interpreter.inputs_size(); ++i) {
        TfLiteTensor *in = interpreter.input(i);
#ifdef EXPECTED_HEADER
        if (at + in->bytes > kInputSize) {
            return finish(4, "the model's inputs take more bytes than kInput has");
        }
        memcpy(in->data.raw, kInput + at, in->bytes);
#else
        memset(in->data.raw, 0, in->bytes);
#endif
        at += in->bytes;
    }

    if (interpreter.Invoke() != kTfLiteOk) {
        return finish(3, "Invoke() failed");
    }

    // Read the outputs (here: compared byte for byte with the expected ones).
    size_t out_at = 0;
    int differ = 0;
    for (size_t i = 0; i < interpreter.outputs_size(); ++i) {
        const TfLiteTensor *out = interpreter.output(i);
#ifdef EXPECTED_HEADER
        if (out_at + out->bytes > kExpectedOutputSize) {
            return finish(4, "the model's outputs take more bytes than kExpectedOutput has");
        }
        differ |= memcmp(out->data.raw, kExpectedOutput + out_at, out->bytes) != 0;
#endif
        out_at += out->bytes;
    }
#ifdef EXPECTED_HEADER
    if (at != kInputSize || out_at != kExpectedOutputSize) {
        return finish(4, "the model's inputs or outputs differ in size from the expected header's");
    }
#endif
    if (differ) {
        return finish(1, "outputs differ from the expected outputs");
    }
    return ran_ok(interpreter.arena_used_bytes());
}
