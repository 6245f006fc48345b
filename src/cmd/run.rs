//! `memtrace run`: trace layers, report buffers, access counts and O_s.

use std::path::PathBuf;
use std::process::ExitCode;

use super::Format;
use anyhow::Result;
use clap::Args;
use memtrace_driver::contract::broken_layers;
use memtrace_driver::kernels::Kernels;
use memtrace_driver::run::{
    flagged_layers, run as trace_layers, tables_text, warnings, ModelOptions, RunOptions,
};
use memtrace_tracer::Arch;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Kernel binary (ELF for Cortex-M4 or x86-64) built with memtrace.h, or
    /// a model (MODEL.tflite or zoo:NAME, whose weights --seed draws as
    /// verify's): it then runs on real TensorFlow Lite Micro in the
    /// emulator, one layer per operator.
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
    /// Exit with status 1 when a layer breaks the memory contract (stray
    /// write, output read before written, write to an input, weights or
    /// bias, scratch not used to its end); without it they are warnings.
    /// O_s cross-checks are --strict-os's.
    #[arg(long)]
    pub strict: bool,
    /// Exit with status 1 when a layer fails an O_s cross-check (UNSAFE
    /// analytic bound, algorithmic MISMATCH, exact below monotone). The
    /// algorithmic and analytic methods model the TFLM reference loop nests,
    /// so on other kernels (CMSIS-NN) a disagreement is expected and the
    /// traced value is the one to use; without it they are warnings.
    #[arg(long)]
    pub strict_os: bool,
    /// One warning per failed O_s cross-check, also on layers that ran other
    /// kernels than the TFLM reference, where a difference is expected and
    /// otherwise summed up in one note.
    #[arg(long)]
    pub explain: bool,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Stop a guest that runs longer than this many instructions.
    #[arg(long, default_value_t = memtrace_driver::common::MAX_INSTRUCTIONS)]
    pub max_instructions: u64,
    /// Observe buffers with memory hooks even when neither --events nor
    /// --plot needs each access's exact instruction (several times slower;
    /// the O_s and counts are the same, see docs/protocol.md "Access paths").
    #[arg(long)]
    pub exact_time: bool,
    /// With a .tflite: TFLM's kernels (tflm: its reference kernels,
    /// tflm-runner.elf; cmsis-nn: its CMSIS-NN kernels, tflm-runner-cmsis.elf).
    #[arg(long, value_enum, default_value_t = Kernels::Tflm)]
    pub kernels: Kernels,
    /// With a .tflite: the runner's architecture.
    #[arg(long, value_enum, default_value_t = Arch::CortexM4)]
    pub target: Arch,
    /// With a .tflite: the TFLM runner ELF (default:
    /// harness-c/build/TARGET/tflm-runner.elf or tflm-runner-cmsis.elf).
    #[arg(long, value_name = "ELF")]
    pub runner: Option<PathBuf>,
    /// With a .tflite: the arena TFLM gets (default: the runner's whole
    /// arena region; TFLM reports what it used).
    #[arg(long, value_name = "BYTES")]
    pub arena_bytes: Option<u64>,
    /// With a .tflite: raw bytes of the graph inputs, concatenated in order
    /// (default: data generated from --seed).
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
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
            model: ModelOptions {
                kernels: a.kernels,
                target: a.target,
                runner: a.runner.clone(),
                arena_bytes: a.arena_bytes,
                input: a.input.clone(),
            },
        }
    }
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    let report = trace_layers(&RunOptions::from(&args))?;
    match args.format {
        Format::Json => super::emit(&(serde_json::to_string_pretty(&report)? + "\n"))?,
        Format::Table => super::emit(&tables_text(&report)?)?,
    }
    for line in warnings(&report, args.explain) {
        super::say(&line);
    }
    let flagged = flagged_layers(&report);
    let failed_os = flagged > 0 && args.strict_os;
    if failed_os {
        eprintln!("error: {flagged} layer(s) failed an O_s cross-check (--strict-os)");
    }
    let broken = broken_layers(&report);
    let failed_contract = broken > 0 && args.strict;
    if failed_contract {
        eprintln!("error: {broken} layer(s) broke the memory contract (--strict)");
    }
    if failed_os || failed_contract {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
