//! The configuration arguments `validate` and `table` share.

use std::path::PathBuf;

use clap::Args;
use memtrace_driver::workflows::sweep::ConfigSelection;
use memtrace_overlap::configs::DEFAULT_BUDGET;

/// Which configurations to sweep.
#[derive(Args, Debug, Clone)]
pub struct ConfigArgs {
    /// Operator(s) of the random configurations: a name, a comma list, or `all`.
    #[arg(long = "op", value_name = "OP", value_delimiter = ',')]
    pub ops: Vec<String>,
    /// Element type of the random configurations: f32, int8 or all.
    #[arg(long, default_value = "f32", value_name = "f32|int8|all")]
    pub dtype: String,
    /// Random configurations per (op, dtype).
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub configs: usize,
    /// Seed of the configuration generator (also sent to the guest's data
    /// generator).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A file of layer specs, one per line (`#` comments, `{a,b}` and
    /// `{lo..hi}` grids allowed).
    #[arg(long, value_name = "FILE")]
    pub configs_file: Option<PathBuf>,
    /// A layer spec with `{a,b}` / `{lo..hi}` alternatives, expanded into every
    /// combination (repeatable), e.g.
    /// 'op=max_pool,input=1x{7,8}x{5..6}x3,filter=3x3,stride={1,2}'.
    #[arg(long, value_name = "SPEC")]
    pub grid: Vec<String>,
    /// Upper bound of the estimated instructions of a random configuration.
    #[arg(long, default_value_t = DEFAULT_BUDGET, value_name = "N")]
    pub budget: u64,
    /// Worker threads (default: all cores).
    #[arg(long, value_name = "N", value_parser = super::jobs)]
    pub jobs: Option<usize>,
    /// Stop a guest that runs longer than this many instructions.
    #[arg(long, default_value_t = 2_000_000_000, value_name = "N")]
    pub max_instructions: u64,
}

impl From<ConfigArgs> for ConfigSelection {
    fn from(a: ConfigArgs) -> Self {
        ConfigSelection {
            ops: a.ops,
            dtype: a.dtype,
            configs: a.configs,
            seed: a.seed,
            configs_file: a.configs_file,
            grid: a.grid,
            budget: a.budget,
            jobs: a.jobs,
            max_instructions: a.max_instructions,
        }
    }
}
