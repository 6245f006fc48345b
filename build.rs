//! Tells the integration tests whether the CMSIS-NN guests were built: they
//! are only when `CMSIS_NN_DIR` points at a CMSIS-NN checkout (harness-c's
//! Makefile). Without them, the CMSIS-NN tests are reported as ignored, by
//! name and with the reason, instead of passing silently.

fn main() {
    let probe = "harness-c/build/cortex-m4/suite-cmsis.elf";
    println!("cargo:rerun-if-changed={probe}");
    println!("cargo:rustc-check-cfg=cfg(no_cmsis)");
    if !std::path::Path::new(probe).exists() {
        println!("cargo:rustc-cfg=no_cmsis");
        println!(
            "cargo:warning=CMSIS-NN guests not built ({probe} is missing): the CMSIS-NN tests \
             will be ignored; set CMSIS_NN_DIR=/path/to/CMSIS-NN and run `make -C harness-c`"
        );
    }
}
