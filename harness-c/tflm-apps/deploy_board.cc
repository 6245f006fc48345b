// deploy_board.cc — what the firmware `main` of docs/deploy.md
// (examples/deploy_main.cc) takes from memtrace's run-time library, for the
// same main linked as an ordinary semihosted program (`make deploy-check`)
// that `memtrace check` runs as built: there is no memtrace port on such a
// board, so the port is ordinary memory (the exit reason written there is
// lost; main's return value is the exit status), and TFLM's messages go to
// the console (semihosting.cc), so no last message is kept.
#include <stdint.h>

extern "C" {
volatile uint32_t memtrace_port[2];
}

namespace mtflm {
const char *last_log() { return ""; }
}  // namespace mtflm
