//! `memtrace run`: trace layers, report buffers, access counts and O_s.

use std::path::PathBuf;
use std::process::ExitCode;

use super::Format;
use anyhow::Result;
use clap::Args;
use memtrace_driver::contract::broken_layers;
use memtrace_driver::run::{
    flagged_layers, run as trace_layers, tables_text, warnings, RunOptions,
};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Kernel binary (ELF for Cortex-M4 or x86-64) built with memtrace.h.
    pub elf: PathBuf,
    /// Trace only this layer (repeatable); all layers when absent.
    #[arg(long = "layer", value_name = "NAME")]
    pub layers: Vec<String>,
    /// Layer configuration written into the guest's job mailbox, e.g.
    /// 'op=depthwise_conv2d,dtype=f32,input=1x112x112x96,filter=1x3x3x96,stride=2,padding=same'.
    #[arg(long, value_name = "SPEC")]
    pub job: Option<String>,
    /// Seed of the guest's data generator for --job.
    #[arg(long, default_value_t = 1)]
    pub seed: u32,
    /// Write every event to this Parquet file.
    #[arg(long, value_name = "OUT.parquet")]
    pub events: Option<PathBuf>,
    /// Draw the trace (x = instruction, y = byte offset) to a .png or .svg.
    /// Layers with a spec also get the O_s curves drawn over them: maxW on the
    /// output; minR, the clobber front maxW − OB + O_s and the analytic bound
    /// on the input (docs/overlap.md).
    #[arg(long, value_name = "OUT.png|OUT.svg")]
    pub plot: Option<PathBuf>,
    /// With --plot: draw only the trace, without the O_s curves.
    #[arg(long)]
    pub no_overlay: bool,
    /// Exit with status 1 when a layer fails an O_s cross-check (UNSAFE
    /// analytic bound, algorithmic MISMATCH) or breaks the memory contract
    /// (stray write, output read before written, write to an input, weights
    /// or bias, scratch not used to its end); without it they are warnings.
    #[arg(long)]
    pub strict: bool,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Stop a guest that runs longer than this many instructions.
    #[arg(long, default_value_t = 20_000_000_000)]
    pub max_instructions: u64,
    /// Observe buffers with memory hooks even when neither --events nor
    /// --plot needs each access's exact instruction (several times slower;
    /// the O_s and counts are the same, see docs/protocol.md "Access paths").
    #[arg(long)]
    pub exact_time: bool,
}

impl From<&RunArgs> for RunOptions {
    fn from(a: &RunArgs) -> Self {
        RunOptions {
            elf: a.elf.clone(),
            layers: a.layers.clone(),
            job: a.job.clone(),
            seed: a.seed,
            events: a.events.clone(),
            plot: a.plot.clone(),
            no_overlay: a.no_overlay,
            max_instructions: a.max_instructions,
            exact_time: a.exact_time,
        }
    }
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    let report = trace_layers(&RunOptions::from(&args))?;
    match args.format {
        Format::Json => super::emit(&(serde_json::to_string_pretty(&report)? + "\n"))?,
        Format::Table => super::emit(&tables_text(&report)?)?,
    }
    for line in warnings(&report) {
        eprintln!("{line}");
    }
    let flagged = flagged_layers(&report);
    if flagged > 0 && args.strict {
        eprintln!("error: {flagged} layer(s) failed an O_s cross-check (--strict)");
    }
    let broken = broken_layers(&report);
    if broken > 0 && args.strict {
        eprintln!("error: {broken} layer(s) broke the memory contract (--strict)");
    }
    if (flagged > 0 || broken > 0) && args.strict {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
