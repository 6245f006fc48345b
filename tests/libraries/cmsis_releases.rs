//! Every CMSIS-NN release from v4.0.0 to the development head builds, on
//! both guest targets, through `CMSIS_NN_DIR` alone, and its kernel suite
//! runs (harness-c/README.md, "CMSIS-NN releases").
//!
//! The releases are the checkouts beside the repository
//! (`../shared/third_party/cmsis-nn*`, see its README); a missing one is
//! ignored by name (build.rs: `no_cmsis_v4` ...). Each test builds its
//! release with harness-c's Makefile into its own build directory
//! (`BUILD=$CARGO_TARGET_TMPDIR/cmsis-releases/<release>`), so the tests run
//! in parallel and never touch `harness-c/build`. Measured on 2 shared cores
//! (`cargo test --release --test libraries cmsis_releases::`): 175 s the first time for
//! all five (51–68 s of `make` per release: the suite objects, the library
//! and the glue of both targets, two releases at a time), about 30 s once
//! built (1.7 s of `make` per release; the rest is tracing).
//!
//! For each release: the probed API forms (cmsis_nn_features.h) are the ones
//! its headers have; the built-in layers run on both targets with CMSIS-NN
//! kernels; a `pad` and a `transpose_conv` job run the library's kernel when
//! the release has it and the TFLM reference kernel — named as such in the
//! report — when it does not; and a `transpose_conv` through the library's
//! own kernel matches the reference bit for bit (the suite exits 5 if not).
//! The v6.0.0 test also checks the dependency tracking: after building
//! v7.0.0 into the same directory, switching back relinks without compiling.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;

const TARGETS: [&str; 2] = ["cortex-m4", "x86_64"];
const PAD: &str = "op=pad,dtype=int8,input=1x5x6x3,pad_before=0x1x2x0,pad_after=0x2x1x0";
const POOL_MAX_2: &str = "op=max_pool,dtype=int8,input=2x8x8x16,filter=2x2,stride=2";
const POOL_AVG_2: &str = "op=average_pool,dtype=int8,input=2x7x7x16,filter=7x7,padding=valid";
const TRANSPOSE_CONV: &str =
    "op=transpose_conv,dtype=int8,input=1x4x4x8,filter=4x3x3x8,stride=2,padding=same";

/// The API forms a release has (cmsis-nn/probe.sh).
struct Release {
    dir: &'static str,
    pad: u32,
    transpose_conv: u32,
    vector_sum_args: u32,
    /// The pools loop over the batch themselves (v6.0.0 on).
    pool_batches: u32,
}

fn checkout(r: &Release) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/third_party")
        .join(r.dir)
}

fn build_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("cmsis-releases")
        .join(name)
}

/// `make -C harness-c BUILD=... CMSIS_NN_DIR=... <elfs>`; its output.
fn make(build: &Path, cmsis: &Path, elfs: &[String]) -> String {
    let mut args = vec![
        "-j2".to_owned(),
        format!("BUILD={}", build.display()),
        format!("CMSIS_NN_DIR={}", cmsis.display()),
    ];
    args.extend_from_slice(elfs);
    make_harness(&args)
}

fn elfs(build: &Path, targets: &[&str], names: &[&str]) -> Vec<String> {
    let mut v = Vec::new();
    for t in targets {
        for n in names {
            v.push(build.join(t).join(n).display().to_string());
        }
    }
    v
}

/// The generated cmsis_nn_features.h of the checkout the ELFs were last
/// linked with (`$(BUILD)/cmsis-nn-key`: "<key> <CMSIS_NN_DIR>").
fn features(build: &Path, target: &str) -> String {
    let stamp = std::fs::read_to_string(build.join("cmsis-nn-key")).unwrap();
    let key = stamp.split_whitespace().next().expect("a key");
    let header = build
        .join(target)
        .join(format!("cmsis-nn-{key}"))
        .join("cmsis_nn_features.h");
    std::fs::read_to_string(&header).unwrap_or_else(|e| panic!("{}: {e}", header.display()))
}

fn check_release(name: &str, r: &Release) {
    let build = build_dir(name);
    let t0 = std::time::Instant::now();
    make(
        &build,
        &checkout(r),
        &elfs(&build, &TARGETS, &["suite-cmsis.elf"]),
    );
    eprintln!(
        "{name}: built both targets in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    for target in TARGETS {
        let f = features(&build, target);
        for (macro_name, want) in [
            ("MEMTRACE_CMSIS_NN_PAD", r.pad),
            ("MEMTRACE_CMSIS_NN_TRANSPOSE_CONV", r.transpose_conv),
            ("MEMTRACE_CMSIS_NN_VECTOR_SUM_ARGS", r.vector_sum_args),
            ("MEMTRACE_CMSIS_NN_POOL_BATCHES", r.pool_batches),
        ] {
            assert!(
                f.contains(&format!("#define {macro_name} {want}\n")),
                "{name} {target}: want {macro_name} {want}:\n{f}"
            );
        }
        let suite = build.join(target).join("suite-cmsis.elf");
        // The built-in MobileNet layers: every one through CMSIS-NN.
        let report = run_json(&suite, &[]);
        let layers = report["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 5, "{name} {target}");
        for l in layers {
            assert_eq!(l["library"], "CMSIS-NN", "{name} {target} {}", l["name"]);
        }
        // Batch-2 pools: v4.x and v5.0.0 pool one image per call, so the
        // glue loops; the suite checks the output against the TFLM
        // reference bit for bit (run_json fails on its exit 5).
        for spec in [POOL_MAX_2, POOL_AVG_2] {
            let l = run_job(&suite, spec);
            // (x86-64's max pool copies through `memcpy`, attributed to
            // the harness: docs/kernels.md, "Known issues".)
            assert_ne!(
                l["library"], "TFLM reference",
                "{name} {target} {spec}: {l}"
            );
        }
        // Layers whose function the release may lack.
        for (spec, has) in [(PAD, r.pad != 0), (TRANSPOSE_CONV, r.transpose_conv != 0)] {
            let l = run_job(&suite, spec);
            let library = l["library"].as_str().unwrap();
            if has {
                assert_ne!(library, "TFLM reference", "{name} {target} {spec}: {l}");
            } else {
                assert_eq!(
                    library, "TFLM reference",
                    "{name} {target} {spec}: not in this release, the reference kernel runs"
                );
            }
        }
    }
}

#[test]
#[cfg_attr(
    no_cmsis_v4,
    ignore = "CMSIS-NN v4.0.0 not at ../shared/third_party/cmsis-nn-v4.0.0"
)]
fn v4_0_0_builds_and_runs() {
    check_release(
        "v4.0.0",
        &Release {
            dir: "cmsis-nn-v4.0.0",
            pad: 0,
            transpose_conv: 0,
            vector_sum_args: 0,
            pool_batches: 0,
        },
    );
}

#[test]
#[cfg_attr(
    no_cmsis_v5,
    ignore = "CMSIS-NN v5.0.0 not at ../shared/third_party/cmsis-nn-v5.0.0"
)]
fn v5_0_0_builds_and_runs() {
    check_release(
        "v5.0.0",
        &Release {
            dir: "cmsis-nn-v5.0.0",
            pad: 0,
            transpose_conv: 1,
            vector_sum_args: 4,
            pool_batches: 0,
        },
    );
}

const V6: Release = Release {
    dir: "cmsis-nn-v6.0.0",
    pad: 0,
    transpose_conv: 1,
    vector_sum_args: 6,
    pool_batches: 1,
};

const V7: Release = Release {
    dir: "cmsis-nn",
    pad: 1,
    transpose_conv: 2,
    vector_sum_args: 7,
    pool_batches: 1,
};

#[test]
#[cfg_attr(
    no_cmsis_v6,
    ignore = "CMSIS-NN v6.0.0 not at ../shared/third_party/cmsis-nn-v6.0.0"
)]
#[cfg_attr(
    all(no_cmsis_v7, not(no_cmsis_v6)),
    ignore = "CMSIS-NN v7.0.0 not at ../shared/third_party/cmsis-nn"
)]
fn v6_0_0_builds_and_runs_and_switching_back_relinks_only() {
    check_release("v6.0.0", &V6);
    // Dependency tracking: another checkout into the same build directory
    // links its own glue, compiled against its own headers, from its own
    // directory (never objects made for v6.0.0's headers)...
    let build = build_dir("v6.0.0");
    let key = || {
        let stamp = std::fs::read_to_string(build.join("cmsis-nn-key")).unwrap();
        stamp.split_whitespace().next().unwrap().to_owned()
    };
    let glue = |k: &str| format!("cmsis-nn-{k}/suite/kernels_cmsis.o");
    let v6_key = key();
    let suite = elfs(&build, &["x86_64"], &["suite-cmsis.elf"]);
    let v7 = make(&build, &checkout(&V7), &suite);
    let v7_key = key();
    assert_ne!(v6_key, v7_key, "another checkout, another build directory");
    assert!(v7.contains(&glue(&v7_key)), "v7.0.0 glue linked:\n{v7}");
    assert!(
        !v7.contains(&glue(&v6_key)),
        "no v6.0.0 object linked:\n{v7}"
    );
    // ...and going back to v6.0.0 relinks without compiling anything.
    let back = make(&build, &checkout(&V6), &suite);
    assert_eq!(key(), v6_key);
    assert!(
        !back.contains(" -c "),
        "nothing compiled when switching back:\n{back}"
    );
    assert!(
        back.contains(&glue(&v6_key)),
        "relinked with the v6.0.0 glue:\n{back}"
    );
    let l = run_job(Path::new(&suite[0]), PAD);
    assert_eq!(l["library"], "TFLM reference", "the v6.0.0 suite again");
}

#[test]
#[cfg_attr(
    no_cmsis_v7,
    ignore = "CMSIS-NN v7.0.0 not at ../shared/third_party/cmsis-nn"
)]
fn v7_0_0_builds_and_runs() {
    check_release("v7.0.0", &V7);
}

#[test]
#[cfg_attr(
    no_cmsis_head,
    ignore = "CMSIS-NN head not at ../shared/third_party/cmsis-nn-main"
)]
fn development_head_builds_and_runs() {
    check_release(
        "head",
        &Release {
            dir: "cmsis-nn-main",
            pad: 1,
            transpose_conv: 2,
            vector_sum_args: 7,
            pool_batches: 1,
        },
    );
}

#[test]
#[cfg_attr(
    no_cmsis_v7,
    ignore = "CMSIS-NN v7.0.0 not at ../shared/third_party/cmsis-nn"
)]
fn the_same_checkout_seen_from_a_path_that_is_gone_still_builds() {
    // A CI clone, a copied tree: the build directory is named by content, so
    // the same checkout at another path reuses it. The old path's dependency
    // files must not make a source that no longer exists a prerequisite.
    let build = build_dir("v7.0.0-moved");
    let suite = elfs(&build, &["x86_64"], &["suite-cmsis.elf"]);
    let gone = tempfile::tempdir().unwrap();
    let link = gone.path().join("cmsis-nn");
    std::os::unix::fs::symlink(checkout(&V7), &link).unwrap();
    make(&build, &link, &suite);
    let first = std::fs::read_to_string(build.join("cmsis-nn-key")).unwrap();
    drop(gone);
    assert!(!link.exists());
    make(&build, &checkout(&V7), &suite);
    let second = std::fs::read_to_string(build.join("cmsis-nn-key")).unwrap();
    assert_eq!(
        first.split_whitespace().next(),
        second.split_whitespace().next(),
        "the same content, the same build directory"
    );
}

#[test]
fn the_documented_release_recipe_builds_beside_the_default_guests() {
    // docs/kernels.md's recipe, as written (its `R=` folder and make line),
    // dry-run: every file it would write lies in its own folder, none in
    // harness-c/build/<target>/ where the default guests live.
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/kernels.md"))
            .unwrap();
    let folder = docs
        .lines()
        .find_map(|l| l.strip_prefix("R="))
        .and_then(|l| l.split_whitespace().next())
        .expect("docs/kernels.md's release recipe sets R=");
    assert_ne!(folder, "build", "{folder}");
    let release =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/third_party/cmsis-nn-v5.0.0");
    if !release.exists() {
        return;
    }
    let elf = format!("{folder}/cortex-m4/suite-cmsis.elf");
    let dry = make_harness(&[
        "-n".to_owned(),
        format!("BUILD={folder}"),
        elf.clone(),
        format!("CMSIS_NN_DIR={}", release.display()),
    ]);
    let written: Vec<&str> = dry
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "-o")
        .map(|w| w[1])
        .collect();
    assert!(written.iter().any(|o| *o == elf), "{dry}");
    for out in &written {
        assert!(
            !out.starts_with("build/cortex-m4/") && !out.starts_with("build/x86_64/"),
            "the recipe would write {out} over a default guest"
        );
    }
}
