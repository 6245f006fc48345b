// semihosting.cc — the board file of TFLM's examples built for `memtrace
// check`: what TFLM leaves to the platform, on Arm semihosting (newlib's
// --specs=rdimon.specs). TFLM's own Cortex-M logging
// (cortex_m_generic/debug_log.cc, compiled unmodified beside this file)
// hands each message to a callback the platform registers; a board's
// InitializeTarget() registers one that reaches its UART, this one writes
// to the semihosting console. The time functions replace
// cortex_m_generic/micro_time.cc, which reads the DWT cycle counter of a
// device header: here semihosting's clock (SYS_CLOCK, centiseconds).
#include <stdio.h>
#include <time.h>

#include "tensorflow/lite/micro/cortex_m_generic/debug_log_callback.h"
#include "tensorflow/lite/micro/micro_time.h"
#include "tensorflow/lite/micro/system_setup.h"

namespace {

void write_to_console(const char *s) {
    fputs(s, stdout);
    fflush(stdout);
}

}  // namespace

namespace tflite {

void InitializeTarget() { RegisterDebugLogCallback(write_to_console); }

uint32_t ticks_per_second() { return CLOCKS_PER_SEC; }

uint32_t GetCurrentTimeTicks() { return static_cast<uint32_t>(clock()); }

}  // namespace tflite
