//! Tells the integration tests which optional guests and tools exist, so
//! that tests needing a missing one are reported as ignored, by name and
//! with the reason, instead of passing silently:
//! * the CMSIS-NN guests, built only when `CMSIS_NN_DIR` points at a
//!   CMSIS-NN checkout (harness-c's Makefile);
//! * the TFLM runners, built only when `TFLM_TREE` points at a TFLM tree
//!   (on x86-64 also only with musl's libm);
//! * the other Cortex-M cores' suites and CMSIS-NN TFLM runners, the RISC-V
//!   suite and reference TFLM runner (`make -C harness-c cores-tested`);
//! * the host oracle, PyPI `tflite-micro` in `MEMTRACE_TFLM_PYTHON`.

fn main() {
    let optional = [
        (
            "no_cmsis",
            "harness-c/build/cortex-m4/suite-cmsis.elf",
            "the CMSIS-NN tests will be ignored; set CMSIS_NN_DIR=/path/to/CMSIS-NN and run `make -C harness-c`",
        ),
        (
            "no_tflm",
            "harness-c/build/cortex-m4/tflm-runner-cmsis.elf",
            "the TFLM runtime tests will be ignored; set TFLM_TREE=/path/to/tflm and run `make -C harness-c`",
        ),
        (
            "no_tflm_x86",
            "harness-c/build/x86_64/tflm-runner-cmsis.elf",
            "the x86-64 TFLM runner tests will be ignored; install musl-dev and run `make -C harness-c`",
        ),
        // CMSIS-NN releases beside the repository (tests/libraries/cmsis_releases.rs).
        (
            "no_cmsis_v4",
            "../shared/third_party/cmsis-nn-v4.0.0/Include/arm_nnfunctions.h",
            "the CMSIS-NN v4.0.0 release test will be ignored",
        ),
        (
            "no_cmsis_v5",
            "../shared/third_party/cmsis-nn-v5.0.0/Include/arm_nnfunctions.h",
            "the CMSIS-NN v5.0.0 release test will be ignored",
        ),
        (
            "no_cmsis_v6",
            "../shared/third_party/cmsis-nn-v6.0.0/Include/arm_nnfunctions.h",
            "the CMSIS-NN v6.0.0 release test will be ignored",
        ),
        (
            "no_cmsis_v7",
            "../shared/third_party/cmsis-nn/Include/arm_nnfunctions.h",
            "the CMSIS-NN v7.0.0 release test will be ignored",
        ),
        (
            "no_cmsis_head",
            "../shared/third_party/cmsis-nn-main/Include/arm_nnfunctions.h",
            "the CMSIS-NN development-head release test will be ignored",
        ),
    ];
    for (cfg, probe, what) in optional {
        println!("cargo:rerun-if-changed={probe}");
        println!("cargo:rustc-check-cfg=cfg({cfg})");
        if !std::path::Path::new(probe).exists() {
            println!("cargo:rustc-cfg={cfg}");
            println!("cargo:warning={probe} is missing: {what}");
        }
    }
    // Every core's suites and CMSIS-NN runner (harness-c's CORE_TEST_ELFS),
    // or the per-core tests are ignored (one missing guest would otherwise
    // fail them half-way).
    println!("cargo:rustc-check-cfg=cfg(no_cores)");
    let mut cores_missing = None;
    for core in ["cortex-m0", "cortex-m3", "cortex-m7", "cortex-m33"] {
        for elf in ["suite.elf", "suite-cmsis.elf", "tflm-runner-cmsis.elf"] {
            let probe = format!("harness-c/build/{core}/{elf}");
            println!("cargo:rerun-if-changed={probe}");
            if cores_missing.is_none() && !std::path::Path::new(&probe).exists() {
                cores_missing = Some(probe);
            }
        }
    }
    if let Some(probe) = cores_missing {
        println!("cargo:rustc-cfg=no_cores");
        println!(
            "cargo:warning={probe} is missing: the per-core tests will be ignored; run `make -C harness-c cores-tested`"
        );
    }
    // The QEMU engine's plugin and the AN547 board's kernel suites
    // (`make qemu-guests`, part of `make test`).
    println!("cargo:rustc-check-cfg=cfg(no_qemu)");
    let qemu_probes = [
        "harness-c/build/qemu/libmemtrace-qemu.so",
        "harness-c/build/cortex-m55/suite-cmsis.elf",
        "harness-c/build/cortex-m4-an547/suite.elf",
        "harness-c/build/cortex-m4-an547/suite-cmsis.elf",
        "harness-c/build/cortex-m55/stack-overflow.elf",
    ];
    for probe in qemu_probes {
        println!("cargo:rerun-if-changed={probe}");
    }
    if let Some(probe) = qemu_probes
        .iter()
        .find(|p| !std::path::Path::new(p).exists())
    {
        println!("cargo:rustc-cfg=no_qemu");
        println!(
            "cargo:warning={probe} is missing: the QEMU engine's tests will be ignored; run `make qemu-guests`"
        );
    }
    // The RISC-V suite, reference-kernel runner and error guests (also
    // `cores-tested`).
    println!("cargo:rustc-check-cfg=cfg(no_riscv)");
    for elf in [
        "suite.elf",
        "tflm-runner.elf",
        "fault.elf",
        "stack-overflow.elf",
    ] {
        let probe = format!("harness-c/build/riscv32/{elf}");
        println!("cargo:rerun-if-changed={probe}");
        if !std::path::Path::new(&probe).exists() {
            println!("cargo:rustc-cfg=no_riscv");
            println!(
                "cargo:warning={probe} is missing: the RISC-V tests will be ignored; run `make -C harness-c cores-tested`"
            );
            break;
        }
    }
    println!("cargo:rerun-if-env-changed=MEMTRACE_TFLM_PYTHON");
    println!("cargo:rustc-check-cfg=cfg(no_oracle)");
    if std::env::var_os("MEMTRACE_TFLM_PYTHON").is_none() {
        println!("cargo:rustc-cfg=no_oracle");
    }
}
