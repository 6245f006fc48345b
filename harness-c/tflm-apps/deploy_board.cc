// deploy_board.cc — what the firmware `main` of docs/deploy.md
// (examples/deploy_main.cc) takes from the harness's TFLM platform file,
// for the same main linked as an ordinary semihosted program (`make
// deploy-check`) that `memtrace check` runs as built: TFLM's messages go
// to the console (semihosting.cc), so no last message is kept.
namespace mtflm {
const char *last_log() { return ""; }
}  // namespace mtflm
