//! `memtrace run`: trace layers, report buffers, access counts and O_s.

use std::path::PathBuf;
use std::process::ExitCode;

use super::Format;
use anyhow::Result;
use clap::Args;
use memtrace_abi::EngineKind;
use memtrace_driver::runtime::kernels::Kernels;
use memtrace_driver::workflows::run::{self, ModelOptions, RunAnswer, RunOptions};
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
    #[arg(long, requires = "plot")]
    pub no_overlay: bool,
    /// Exit with status 1 when a layer breaks the memory contract (stray
    /// write, output read before written, write to an input, weights or
    /// bias, scratch not used to its end); without it they are warnings.
    /// On a .tflite model the contract is then checked in a second,
    /// red-zoned run (64 B free around every buffer TFLM plans), so a kernel
    /// that writes past its scratch is caught even where TFLM's own layout
    /// puts a tensor right after it. O_s cross-checks are --strict-os's.
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
    #[arg(long, default_value_t = memtrace_driver::support::common::MAX_INSTRUCTIONS)]
    pub max_instructions: u64,
    /// Observe buffers with memory hooks even when neither --events nor
    /// --plot needs each access's exact instruction (several times slower;
    /// the O_s and counts are the same, see docs/protocol.md "Access paths").
    #[arg(long)]
    pub exact_time: bool,
    /// With a .tflite: TFLM's kernels (tflm: its reference kernels,
    /// tflm-runner.elf; cmsis-nn: its CMSIS-NN kernels, tflm-runner-cmsis.elf).
    /// Default: tflm.
    #[arg(long, value_enum)]
    pub kernels: Option<Kernels>,
    /// The core to emulate. With a .tflite: the runner's (default
    /// cortex-m4; the runner is harness-c/build/TARGET/). With an ELF: a
    /// core that implements what its build attributes (.ARM.attributes)
    /// say it uses, else it is refused with the reason (default: the core
    /// they name, cortex-m4 when they name none).
    #[arg(long, value_enum)]
    pub target: Option<Arch>,
    /// The emulator: unicorn (in memtrace's process) or qemu (QEMU 10 with
    /// memtrace's plugin, on the mps3-an547 board). Default: unicorn, and
    /// qemu for the cortex-m55, which Unicorn does not have.
    #[arg(long, value_enum)]
    pub engine: Option<EngineKind>,
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
                kernels: a.kernels.unwrap_or(Kernels::Tflm),
                target: a.target.unwrap_or(Arch::CortexM4),
                elf_target: a.target,
                runner: a.runner.clone(),
                arena_bytes: a.arena_bytes,
                input: a.input.clone(),
                red_zones: a.strict,
            },
            engine: a.engine,
        }
    }
}

/// Ends with a usage error when two outputs name one file (the second
/// written would replace the first).
fn check_distinct_outputs(args: &RunArgs) {
    if let (Some(plot), Some(events)) = (&args.plot, &args.events) {
        if same_output(plot, events) {
            super::usage_error(&format!(
                "--plot and --events both name {}: each output needs a file of its own",
                plot.display()
            ));
        }
    }
}

/// Whether two output paths name one file, existing or not: the same text
/// once `.` parts are dropped, the same file, or the same file name in one
/// folder.
fn same_output(a: &std::path::Path, b: &std::path::Path) -> bool {
    let plain = |p: &std::path::Path| -> PathBuf { p.components().collect() };
    let folder = |p: &std::path::Path| {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
        std::fs::canonicalize(dir.unwrap_or(std::path::Path::new(".")))
    };
    plain(a) == plain(b)
        || memtrace_io::output::same_file(a, b)
        || (a.file_name() == b.file_name()
            && matches!((folder(a), folder(b)), (Ok(x), Ok(y)) if x == y))
}

/// Ends with a usage error naming the first option that only a model run
/// uses when `args.elf` is a kernel binary (an existing file that is no
/// model; a missing one gets the loader's error).
fn check_model_only_options(args: &RunArgs) {
    let is_binary = std::fs::metadata(&args.elf).is_ok_and(|m| m.is_file())
        && !memtrace_driver::workflows::run::is_model(&args.elf);
    if !is_binary {
        return;
    }
    let given = [
        (args.kernels.is_some(), "--kernels"),
        (args.runner.is_some(), "--runner"),
        (args.arena_bytes.is_some(), "--arena-bytes"),
        (args.input.is_some(), "--input"),
    ];
    if let Some((_, option)) = given.iter().find(|(g, _)| *g) {
        super::usage_error(&format!(
            "{option} has no effect on a kernel binary: {} is an ELF, and {option} is for a \
             .tflite model run on TFLM (the ELF's own code and architecture run)",
            args.elf.display()
        ));
    }
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    check_distinct_outputs(&args);
    check_model_only_options(&args);
    let report = run::run(&RunOptions::from(&args))?;
    let answer = RunAnswer {
        report: &report,
        strict: args.strict,
        strict_os: args.strict_os,
        explain: args.explain,
    };
    super::finish(&answer, args.format.into(), None)
}
