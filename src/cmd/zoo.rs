//! `memtrace zoo`: the built-in models.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};
use memtrace_analyzer::model::zoo;
use memtrace_analyzer::output::{write_atomically, write_error};
use memtrace_analyzer::verify::export::{materialize, to_tflite};

#[derive(Args, Debug)]
pub struct ZooArgs {
    #[command(subcommand)]
    pub command: ZooCommand,
}

#[derive(Subcommand, Debug)]
pub enum ZooCommand {
    /// List the built-in model names.
    List,
    /// Write a built-in model as a .tflite file, with the seeded weights and
    /// int8 quantisation `memtrace verify` runs it with.
    Export {
        /// Zoo name, e.g. mobilenet_v1_0.25_128_int8 (`zoo:` optional).
        name: String,
        out: PathBuf,
        /// Seed of the weights.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

pub fn run(args: ZooArgs) -> Result<ExitCode> {
    match args.command {
        ZooCommand::List => {
            for n in zoo::names() {
                super::emit(&format!("{n}\n"))?;
            }
        }
        ZooCommand::Export { name, out, seed } => {
            let model = zoo::build(&name)?;
            let bytes = to_tflite(&materialize(&model, seed))?;
            write_atomically(&out, |w| {
                w.write_all(&bytes).map_err(|e| write_error(&out, e))
            })?;
            eprintln!(
                "wrote {} ({} bytes, {} operators)",
                out.display(),
                bytes.len(),
                model.ops.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
