//! Which layer configurations a sweep traces ([`ConfigSelection`]): random
//! ones per operator and element type, a configs file, grids, drawn only as
//! they are consumed ([`SpecStream`]).

use std::path::PathBuf;

use memtrace_abi::spec::{Dtype, OpKind};
use memtrace_abi::LayerSpec;
use memtrace_io::input::{read_text_limited, MAX_TEXT_FILE};
use memtrace_overlap::configs::{
    expand_grid, parse_configs_file, random_config_iter, try_random_configs, RandomConfigs,
    MAX_LISTED_CONFIGS,
};

use crate::support::error::Result;
use crate::{bail, failed};

/// Which configurations to sweep (shared by `validate` and `table`).
#[derive(Debug, Clone)]
pub struct ConfigSelection {
    /// Operator(s) of the random configurations: a name, a comma list, or `all`.
    pub ops: Vec<String>,
    /// Element type of the random configurations: f32, int8 or all.
    pub dtype: String,
    /// Random configurations per (op, dtype).
    pub configs: usize,
    /// Seed of the configuration generator (also sent to the guest's data
    /// generator).
    pub seed: u64,
    /// A file of layer specs, one per line (`#` comments, `{a,b}` and
    /// `{lo..hi}` grids allowed).
    pub configs_file: Option<PathBuf>,
    /// A layer spec with `{a,b}` / `{lo..hi}` alternatives, expanded into every
    /// combination (repeatable), e.g.
    /// 'op=max_pool,input=1x{7,8}x{5..6}x3,filter=3x3,stride={1,2}'.
    pub grid: Vec<String>,
    /// Upper bound of the estimated instructions of a random configuration.
    pub budget: u64,
    /// Worker threads (default: all cores).
    pub jobs: Option<usize>,
    /// Stop a guest that runs longer than this many instructions.
    pub max_instructions: u64,
}

fn parse_ops(names: &[String]) -> Result<Vec<OpKind>> {
    let mut ops = Vec::new();
    for name in names {
        if name == "all" {
            ops.extend(OpKind::SUITE);
        } else {
            ops.push(name.parse::<OpKind>().map_err(|e| failed!("--op: {e}"))?);
        }
    }
    ops.dedup();
    Ok(ops)
}

fn parse_dtypes(name: &str) -> Result<Vec<Dtype>> {
    Ok(match name {
        "all" => vec![Dtype::Float32, Dtype::Int8],
        other => vec![other
            .parse::<Dtype>()
            .map_err(|e| failed!("--dtype: {e}"))?],
    })
}

impl ConfigSelection {
    /// Whether any configuration source was given.
    pub fn any(&self) -> bool {
        !self.ops.is_empty() || self.configs_file.is_some() || !self.grid.is_empty()
    }

    /// The configurations, in a fixed order: random ones per (op, dtype),
    /// then the configs file, then the grids.
    pub fn specs(&self) -> Result<Vec<LayerSpec>> {
        self.stream()?.collect()
    }

    /// The configurations of [`ConfigSelection::specs`], drawn only as they
    /// are consumed: `validate --configs 1000000` holds the configurations
    /// being traced, not a million of them. Every (op, dtype) stream's first
    /// configuration is drawn here, so a budget no configuration fits fails
    /// at once; one that fails later ends the stream with its error.
    pub fn stream(&self) -> Result<SpecStream> {
        let ops = parse_ops(&self.ops)?;
        let dtypes = parse_dtypes(&self.dtype)?;
        let mut listed = Vec::new();
        if let Some(path) = &self.configs_file {
            let text = read_text_limited(path, MAX_TEXT_FILE, "--configs-file")?;
            listed.extend(
                parse_configs_file(&text)
                    .map_err(|e| failed!("--configs-file {}: {e}", path.display()))?,
            );
        }
        for g in &self.grid {
            let texts = expand_grid(g).map_err(|e| failed!("--grid: {e}"))?;
            if listed.len() + texts.len() > MAX_LISTED_CONFIGS {
                bail!(
                    "--configs-file and --grid give more than {MAX_LISTED_CONFIGS} configurations \
                     in all"
                );
            }
            for text in texts {
                listed.push(LayerSpec::parse(&text).map_err(|e| failed!("--grid `{text}`: {e}"))?);
            }
        }
        let mut random: Vec<RandomConfigs> = Vec::new();
        if self.configs > 0 {
            for &op in &ops {
                for &dtype in &dtypes {
                    try_random_configs(op, dtype, 1, self.seed, self.budget)?;
                    random.push(random_config_iter(op, dtype, self.seed, self.budget));
                }
            }
        }
        let count = random
            .len()
            .saturating_mul(self.configs)
            .saturating_add(listed.len());
        let per_stream = self.configs;
        let specs = random
            .into_iter()
            .flat_map(move |stream| stream.take(per_stream))
            .map(|drawn| drawn.map_err(Into::into))
            .chain(listed.into_iter().map(Ok));
        Ok(SpecStream {
            count,
            specs: Box::new(specs),
        })
    }

    /// Worker threads: `jobs`, or all cores.
    pub fn threads(&self) -> usize {
        crate::support::common::threads(self.jobs)
    }
}

/// Layer configurations drawn one at a time ([`ConfigSelection::stream`]).
pub struct SpecStream {
    count: usize,
    specs: Box<dyn Iterator<Item = Result<LayerSpec>> + Send>,
}

impl SpecStream {
    /// How many configurations the stream yields (unless one fails).
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the stream yields nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

impl Iterator for SpecStream {
    type Item = Result<LayerSpec>;

    fn next(&mut self) -> Option<Self::Item> {
        self.specs.next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_sources_come_in_a_fixed_order() {
        let sel = ConfigSelection {
            ops: vec!["relu".into()],
            dtype: "all".into(),
            configs: 2,
            seed: 7,
            configs_file: None,
            grid: vec!["op=max_pool,input=1x{7,8}x5x3,filter=3x3,stride=1".into()],
            budget: memtrace_overlap::configs::DEFAULT_BUDGET,
            jobs: Some(1),
            max_instructions: 1,
        };
        let specs = sel.specs().unwrap();
        // 2 random relu per dtype (f32, int8), then the two grid points.
        assert_eq!(specs.len(), 6);
        assert!(specs[..4].iter().all(|s| s.op == OpKind::Relu));
        assert_eq!(specs[4].input[1], 7);
        assert_eq!(specs[5].input[1], 8);
        assert_eq!(
            specs,
            sel.specs().unwrap(),
            "the same seed gives the same configs"
        );
        let bad = ConfigSelection {
            ops: vec!["conv9".into()],
            ..sel
        };
        assert!(bad.specs().unwrap_err().to_string().starts_with("--op:"));
    }
}
