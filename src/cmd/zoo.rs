//! `memtrace zoo`: the built-in models.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};
use memtrace_io::output::{write_atomically, write_error};
use memtrace_model::export::{materialize, to_tflite};
use memtrace_model::{tflite, zoo};

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
        /// The .tflite file to write, or `-` for stdout.
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
            // The binary reads the optional `zoo:` as every model argument.
            let bare = name.strip_prefix("zoo:").unwrap_or(&name);
            let model = zoo::build(bare)?;
            let bytes = to_tflite(&materialize(&model, seed))?;
            // A file memtrace itself cannot load is never written.
            tflite::import_bytes(&model.name, &bytes)
                .map_err(anyhow::Error::from)
                .and_then(|m| m.validate().map_err(anyhow::Error::from))
                .map_err(|e| {
                    anyhow::anyhow!(
                        "zoo model {name} cannot be exported as a loadable .tflite: {e} (it is \
                         an abstract graph for the planners: use `memtrace plan zoo:{name}`)",
                        name = model.name
                    )
                })?;
            if out.as_os_str() == "-" {
                let mut stdout = std::io::stdout().lock();
                stdout
                    .write_all(&bytes)
                    .and_then(|()| stdout.flush())
                    .map_err(|e| anyhow::anyhow!("writing to stdout: {e}"))?;
                super::say(&format!(
                    "wrote {} bytes to stdout ({} operators)",
                    bytes.len(),
                    model.ops.len()
                ));
                return Ok(ExitCode::SUCCESS);
            }
            write_atomically(&out, |w| {
                w.write_all(&bytes).map_err(|e| write_error(&out, e))
            })?;
            // The path is the user's: said escaped.
            super::say(&format!(
                "wrote {} ({} bytes, {} operators)",
                out.display(),
                bytes.len(),
                model.ops.len()
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}
