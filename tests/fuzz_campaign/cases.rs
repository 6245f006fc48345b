//! What the classes with rules of their own share: the models they run,
//! a kept input ([`Case`]) and `plan`'s report of a model.

use std::path::PathBuf;

use memtrace_overlap::rng::Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::binary::{Expect, Job};
use crate::common;
use crate::fixtures::kept;
use crate::repo;

/// Small models of `../shared/models/` (each verifies in well under a
/// second): plan files against the oracle, TinySeg options, libraries.
pub(crate) const SMALL_MODELS: [&str; 3] = [
    "mlperf_tiny_ad_fc_autoencoder_int8.tflite",
    "tflm_simple_add_model.tflite",
    "tflm_hello_world_int8.tflite",
];
/// Larger models for the own-library property (seconds per run).
pub(crate) const PROPERTY_MODELS: [&str; 2] =
    ["mlperf_tiny_kws_ds_cnn_int8.tflite", "zoo:sakr_cifar10"];
pub(crate) const LIBRARIES: [&str; 2] = ["tflm", "cmsis-nn"];

pub(crate) fn shared_dir() -> PathBuf {
    repo().join("../shared/models")
}

/// A model argument: a zoo name as it is, a file of `../shared/models/` as
/// `$SHARED/NAME` (kept inputs name no machine's paths).
pub(crate) fn model_arg(name: &str) -> String {
    if name.starts_with("zoo:") {
        name.into()
    } else {
        format!("$SHARED/{name}")
    }
}

pub(crate) fn expand(arg: &str) -> String {
    arg.replace("$SHARED", &shared_dir().display().to_string())
        .replace("$REPO", &repo().display().to_string())
}

pub(crate) fn pick<'a, T>(rng: &mut Rng, items: &'a [T]) -> &'a T {
    &items[rng.range(0, items.len() as u32 - 1) as usize]
}

/// A kept input of the classes below: arguments (`$SHARED`, `$REPO` for
/// the machine's paths), text files, and the class's rule.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Case {
    pub(crate) args: Vec<String>,
    #[serde(default)]
    pub(crate) files: Vec<(String, String)>,
    pub(crate) expect: Expect,
}

pub(crate) fn case_job(target: &'static str, case: Case) -> Job {
    let keep = ("json", serde_json::to_vec_pretty(&case).unwrap());
    Job {
        target,
        files: case
            .files
            .iter()
            .map(|(n, t)| (n.clone(), t.as_bytes().to_vec()))
            .collect(),
        args: case.args.iter().map(|a| expand(a)).collect(),
        keep,
        expect: case.expect,
    }
}

pub(crate) fn kept_cases(target: &'static str) -> Vec<Job> {
    kept(target, "json")
        .iter()
        .filter_map(|b| serde_json::from_slice::<Case>(b).ok())
        .map(|c| case_job(target, c))
        .collect()
}

/// `memtrace plan MODEL --kernels K --format json EXTRA…`.
pub(crate) fn plan_report(model: &str, kernels: &str, extra: &[&str]) -> Value {
    let mut a = vec![
        "plan".to_string(),
        expand(&model_arg(model)),
        "--kernels".into(),
        kernels.into(),
        "--format".into(),
        "json".into(),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    let out = common::memtrace(&a);
    assert!(out.status.success(), "{a:?}: {}", common::stderr(&out));
    common::json(&out)
}

/// A plan's order is the model's.
pub(crate) fn model_order(plan: &Value, ops: usize) -> bool {
    plan["order"]
        .as_array()
        .is_some_and(|o| o.iter().map(Value::as_u64).eq((0..ops as u64).map(Some)))
}
