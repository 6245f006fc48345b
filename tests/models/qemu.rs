//! The QEMU engine (QEMU 10 with memtrace's plugin, the `mps3-an547`
//! board): the Cortex-M55 runs CMSIS-NN's Helium code, and the two engines
//! check each other on one program — the Cortex-M4's kernel suites linked
//! for the board (`harness-c/build/cortex-m4-an547/`), which Unicorn runs as
//! its Cortex-M4 and QEMU on the board's core.

use crate::common;

use common::{guest, json_ok, memtrace, path_str, stderr, u};
use serde_json::Value;

/// `memtrace run ELF ARGS --engine ENGINE --format json`.
fn run_on(engine: &str, elf: &str, args: &[&str]) -> Value {
    let mut all = vec!["run", elf, "--engine", engine];
    all.extend(args);
    json_ok(&all)
}

/// What a layer's trace is, engine-blind: its name, instructions, O_s, and
/// every buffer's name, stores and updates.
fn trace_of(layer: &Value) -> Value {
    let buffers: Vec<Value> = layer["buffers"]
        .as_array()
        .expect("buffers")
        .iter()
        .map(|b| serde_json::json!([b["name"], b["size"], b["stores"], b["updates"]]))
        .collect();
    serde_json::json!({
        "name": layer["name"],
        "instructions": layer["instructions"],
        "buffers": buffers,
        "monotone": layer["overlap"]["monotone_bytes"],
        "exact": layer["overlap"]["exact_bytes"],
    })
}

/// Each buffer's loads `(layer, buffer, element size, loads)`.
fn loads_of(report: &Value) -> Vec<(String, String, u64, u64)> {
    let mut loads = Vec::new();
    for l in report["layers"].as_array().unwrap() {
        for b in l["buffers"].as_array().unwrap() {
            let name = |v: &Value| v.as_str().unwrap().to_owned();
            loads.push((
                name(&l["name"]),
                name(&b["name"]),
                u(&b["elem_size"]),
                u(&b["loads"]),
            ));
        }
    }
    loads
}

#[test]
#[cfg_attr(no_qemu, ignore = "QEMU guests not built: make qemu-guests")]
fn the_two_engines_trace_one_program_alike() {
    for suite in ["suite", "suite-cmsis"] {
        let elf = guest("cortex-m4-an547", suite);
        // Unicorn on its exact access path, the one that sees each access
        // as the instruction made it.
        let unicorn = run_on("unicorn", path_str(&elf), &["--exact-time"]);
        let qemu = run_on("qemu", path_str(&elf), &[]);
        assert_eq!(unicorn["engine"], "unicorn");
        assert_eq!(qemu["engine"], "qemu");
        assert_eq!(unicorn["arch"], "cortex-m4");
        let layers = |r: &Value| -> Vec<Value> {
            r["layers"]
                .as_array()
                .unwrap()
                .iter()
                .map(trace_of)
                .collect()
        };
        let (u_layers, q_layers) = (layers(&unicorn), layers(&qemu));
        assert_eq!(u_layers.len(), 5, "{suite}");
        assert_eq!(u_layers, q_layers, "{suite}: the engines differ on a layer");
        assert_eq!(
            unicorn["instructions"], qemu["instructions"],
            "{suite}: whole-run instructions"
        );
        // Loads are the same count but where Unicorn reports a doubleword
        // load (LDRD, CMSIS-NN's bias reads) as two word loads and QEMU as
        // one: an int32 buffer with exactly twice the loads.
        for (a, b) in loads_of(&unicorn).iter().zip(loads_of(&qemu)) {
            let doubleword = a.2 == 4 && a.3 == 2 * b.3;
            assert!(
                a.3 == b.3 || doubleword,
                "{suite}: loads {a:?} against {b:?}"
            );
        }
        let accesses: u64 = loads_of(&unicorn).iter().map(|l| l.3).sum();
        assert!(accesses > 100_000, "{suite}: {accesses} loads");
    }
}

/// The KWS network's average pool (25×5 window over 64 channels): the
/// layer whose O_s the DSP and Helium paths of CMSIS-NN give most apart.
const KWS_AVERAGE_POOL: &str =
    "op=average_pool,dtype=int8,input=1x25x5x64,filter=1x25x5x1,stride=25x5,padding=valid";

#[test]
#[cfg_attr(no_qemu, ignore = "QEMU guests not built: make qemu-guests")]
fn the_cortex_m55_runs_cmsis_nns_helium_path_on_qemu() {
    let m55 = guest("cortex-m55", "suite-cmsis");
    // The engine is QEMU without asking: Unicorn has no Cortex-M55. The
    // guest checks every CMSIS-NN output against TFLM's reference kernel
    // bit for bit (exit 5 otherwise), so a run that succeeds is a correct
    // one.
    let whole = json_ok(&["run", path_str(&m55)]);
    assert_eq!(whole["engine"], "qemu");
    assert_eq!(whole["arch"], "cortex-m55");
    let pool = |elf: &str| {
        let r = json_ok(&["run", elf, "--job", KWS_AVERAGE_POOL]);
        r["layers"][0]["overlap"]["exact_bytes"].clone()
    };
    let helium = pool(path_str(&m55));
    let dsp = pool(path_str(&guest("cortex-m4-an547", "suite-cmsis")));
    // The figures the script route (QEMU 7.2, addresses only) measured
    // for this layer before the engine existed (docs/kernels.md): 64 B on
    // Helium, 8 000 B on the DSP path.
    assert_eq!(helium, 64, "Helium");
    assert_eq!(dsp, 8000, "DSP");
}

#[test]
#[cfg_attr(no_qemu, ignore = "QEMU guests not built: make qemu-guests")]
fn unicorn_refuses_the_cortex_m55_and_names_the_engine_that_runs_it() {
    let m55 = guest("cortex-m55", "suite-cmsis");
    let out = memtrace(["run", path_str(&m55), "--engine", "unicorn"]);
    // Exit 1, as a binary refused on a core it cannot run on is.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("Unicorn has no cortex-m55"), "{err}");
    assert!(err.contains("--engine qemu"), "{err}");
}

#[test]
#[cfg_attr(no_qemu, ignore = "QEMU guests not built: make qemu-guests")]
fn a_budget_stops_qemu_and_leaves_no_process_behind() {
    // A copy of its own, so that no other test's QEMU runs this path.
    let dir = std::env::temp_dir().join(format!("memtrace-qemu-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let elf = dir.join("budget-m55.elf");
    std::fs::copy(guest("cortex-m55", "suite-cmsis"), &elf).unwrap();
    let out = memtrace(["run", path_str(&elf), "--max-instructions", "100000"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("100000"), "{err}");
    assert!(err.contains("budget"), "{err}");
    // QEMU runs with `-name memtrace:ELF`.
    let ps = std::process::Command::new("pgrep")
        .args(["-f", &format!("memtrace:{}", path_str(&elf))])
        .output()
        .expect("pgrep runs");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        ps.stdout.is_empty(),
        "a QEMU is left: {}",
        String::from_utf8_lossy(&ps.stdout)
    );
}

#[test]
#[cfg_attr(no_qemu, ignore = "QEMU guests not built: make qemu-guests")]
fn a_stack_overflow_on_qemu_is_named_at_its_function_and_line() {
    // A recursion without end inside a layer: the plugin reports the
    // store to the page below the stack, and memtrace names where.
    let out = memtrace(["run", path_str(&guest("cortex-m55", "stack-overflow"))]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("stack overflow: 4 B below the stack bottom"),
        "{err}"
    );
    assert!(err.contains("in layer `deep`"), "{err}");
    assert!(
        err.contains("`descend` (guests/stack_overflow.c:16)"),
        "{err}"
    );
}
