//! The C header a firmware includes ([`header_text`]): the arena to
//! allocate, the model bytes with the plan, the operators to register and
//! where it all comes from; written beside the model ([`write_deployment`]).

use std::path::{Path, PathBuf};

use super::{sha256_prefix, ArenaToAllocate, MeasuredPlan};
use crate::bail;
use crate::support::common::check_output;
use crate::support::error::Result;

/// Who made a deployment's plan, for the header's provenance comment.
#[derive(Clone, Debug)]
pub struct Provenance<'a> {
    /// The command that wrote it (`plan`, `verify`).
    pub command: &'a str,
    /// The model the plan was made for, as the user named it.
    pub source: &'a str,
    /// The planner and O_s source (e.g. `exact (traced O_s)`).
    pub planner: &'a str,
    /// The planner's head (its peak) in bytes.
    pub planned_bytes: u64,
    /// The plan was proven on TFLM by `verify` (shadow map, outputs).
    pub proven: bool,
}

/// Writes `model` and its header for the measured plan `m` (the one
/// `command` planned or proved from `source`); the header's path.
pub(crate) fn write_measured_plan(
    dest: &Path,
    model: &[u8],
    m: &MeasuredPlan,
    arena: &ArenaToAllocate,
    command: &str,
    source: &str,
    proven: bool,
) -> Result<PathBuf> {
    let planner = format!("{} planner (O_s: {})", m.planner, m.overlap);
    write_deployment(
        dest,
        model,
        arena,
        &Provenance {
            command,
            source,
            planner: &planner,
            planned_bytes: m.planned_bytes,
            proven,
        },
    )
}

/// The header's path beside `model` (`OUT.tflite` → `OUT.h`).
pub fn header_path(model: &Path) -> PathBuf {
    model.with_extension("h")
}

/// Why `--emit-offline DEST` cannot be written, if it cannot: the model and
/// its header are a pair of files, the header beside the model (`DEST.h`),
/// so `DEST` must be a file name, not a stream — a FIFO, a character device
/// (`/dev/null`) or a path under `/dev` or `/proc` that exists, beside which
/// a header would be a stray regular file such as `/dev/null.h` — and must
/// not itself end in `.h`.
pub fn deployment_refusal(dest: &Path) -> Option<String> {
    use memtrace_io::output::{output_target, OutputTarget};
    if header_path(dest) == dest {
        return Some(format!(
            "--emit-offline {}: the model's file name must not end in .h (its header is \
             written beside it)",
            dest.display()
        ));
    }
    if let Ok(OutputTarget::Stream(_)) = output_target(dest) {
        return Some(format!(
            "--emit-offline {}: it is a stream (a FIFO, a device or a /dev or /proc path); the \
             model and its C header are written as two files, the header beside the model \
             (NAME.h): give a file name such as out/model.tflite (to check the plan without \
             writing it, leave --emit-offline out)",
            dest.display()
        ));
    }
    None
}

/// The `MicroMutableOpResolver` method that registers TFLite builtin
/// `name` (`CONV_2D` → `AddConv2D`), `None` for a name that is no builtin
/// (a custom operator's code, TinySeg's `MEMTRACE_*` storage operators
/// included).
pub(crate) fn resolver_method(name: &str) -> Option<String> {
    if memtrace_model::OpKind::from_custom_code(name).is_some() {
        return None;
    }
    let builtin = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && name.starts_with(|c: char| c.is_ascii_uppercase());
    if !builtin {
        return None;
    }
    // The four whose method TFLM spells otherwise than word by word.
    let irregular = [
        ("BATCH_MATMUL", "BatchMatMul"),
        ("CUMSUM", "CumSum"),
        ("PADV2", "PadV2"),
        ("UNIDIRECTIONAL_SEQUENCE_LSTM", "UnidirectionalSequenceLSTM"),
    ];
    if let Some((_, m)) = irregular.iter().find(|(n, _)| *n == name) {
        return Some(format!("Add{m}"));
    }
    let words: String = name
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(first) if first.is_ascii_digit() => w.to_string(),
                Some(first) => first.to_string() + &c.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect();
    Some(format!("Add{words}"))
}

/// The resolver lines of the header: an X-macro with one
/// `MicroMutableOpResolver` method per builtin operator of the model, and
/// their count; custom operators are named in a comment (the firmware
/// registers them itself).
fn resolver_lines(model: &[u8]) -> Result<String> {
    let graph = memtrace_model::graph::read_graph(model)?;
    let mut builtins: Vec<String> = Vec::new();
    let mut custom: Vec<&str> = Vec::new();
    for op in &graph.ops {
        match resolver_method(&op.name) {
            Some(m) if !builtins.contains(&m) => builtins.push(m),
            Some(_) => {}
            None if !custom.contains(&op.name.as_str()) => custom.push(&op.name),
            None => {}
        }
    }
    let mut s = String::from(
        "/* The operators of the model (subgraph 0), for\n \
         * tflite::MicroMutableOpResolver<kModelOpCount>: MEMTRACE_MODEL_OPS(OP) calls\n \
         * OP(method) for each, e.g. #define ADD_OP(m) resolver.m(); */\n",
    );
    if !custom.is_empty() {
        s += &format!(
            "/* Custom operators to register yourself (AddCustom): {} */\n",
            c_comment(&custom.join(", "))
        );
    }
    if custom
        .iter()
        .any(|c| memtrace_model::OpKind::from_custom_code(c).is_some())
    {
        s += "/* MEMTRACE_*: TinySeg's storage operators, whose kernels are\n \
              * harness-c/tflm/storage_ops.cc (mtflm::storage_op), with the\n \
              * memtrace_storage region of its custom options (docs/deploy.md). */\n";
    }
    s += "#define MEMTRACE_MODEL_OPS(OP)";
    for m in &builtins {
        s += &format!(" \\\n    OP({m})");
    }
    s += "\n";
    s += &format!(
        "enum {{ kModelOpCount = {} }};\n\n",
        builtins.len() + custom.len()
    );
    Ok(s)
}

/// `text` as it may stand inside a C block comment, whatever it holds (a
/// model's path, a runner's file name, a custom operator's name): printable
/// ASCII, with nothing that ends or opens a comment (`*/` → `*\/`, `/*` →
/// `/\*`), splices a line (`\` → `\\`) or forms a trigraph (`??` →
/// `?\?`); a newline, tab or other control character is written as its C
/// escape (`\n`, `\x7f`), anything beyond ASCII as `\u{HEX}`. So a
/// header compiles to the same values whatever the names in it.
pub(crate) fn c_comment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut prev = '\0';
    for c in text.chars() {
        match c {
            '/' if prev == '*' => out.push_str("\\/"),
            '*' if prev == '/' => out.push_str("\\*"),
            '?' if prev == '?' => out.push_str("\\?"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ' '..='~' => out.push(c),
            c if c.is_ascii() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
        prev = c;
    }
    out
}

/// The C header a firmware includes: `kTensorArenaSize`, the model bytes
/// (`kModel`, `kModelSize`) 16-byte aligned, the operators to register
/// (`MEMTRACE_MODEL_OPS`, `kModelOpCount`) and a comment saying where it all
/// comes from. Valid C (C11) and C++ (C++11).
pub(crate) fn header_text(
    model: &[u8],
    arena: &ArenaToAllocate,
    who: &Provenance<'_>,
) -> Result<String> {
    let resolver = resolver_lines(model)?;
    let mut s = String::with_capacity(model.len() * 6 + 4096);
    s += &format!(
        "/* Written by memtrace {} (`memtrace {}`); do not edit: run it again.\n",
        env!("CARGO_PKG_VERSION"),
        c_comment(who.command)
    );
    s += " *\n";
    s += &format!(
        " * model:    {} ({} B, sha256 {})\n",
        c_comment(who.source),
        model.len(),
        sha256_prefix(model)
    );
    s += &format!(
        " * plan:     {}, head {} B, in the model as OfflineMemoryAllocation{}\n",
        c_comment(who.planner),
        who.planned_bytes,
        if who.proven {
            "; proven by memtrace verify on real TFLM"
        } else {
            ""
        }
    );
    s += &format!(
        " * arena:    kTensorArenaSize = {} B, the smallest arena with which TFLM's\n \
         *           AllocateTensors() and Invoke() succeed (AllocateTensors() fails with\n \
         *           1 B less), measured in the emulator; TFLM reported head {} + tail {} =\n \
         *           {} B. It holds for a buffer aligned to {} bytes: declare\n \
         *           alignas({}) static uint8_t tensor_arena[kTensorArenaSize];\n",
        arena.bytes,
        arena.head_bytes,
        arena.tail_bytes,
        arena.arena_used_bytes,
        arena.alignment,
        arena.alignment
    );
    s += &format!(
        " * TFLM:     {} kernels, {}, the build of {} (sha256 {});\n \
         *           another TFLM version, kernel library or compiler may need another size.\n",
        c_comment(&arena.kernels.to_string()),
        c_comment(&arena.target.to_string()),
        c_comment(&arena.runner),
        c_comment(&arena.runner_sha256)
    );
    s += " * Guide:    docs/deploy.md\n */\n";
    s += "#ifndef MEMTRACE_DEPLOY_MODEL_H\n#define MEMTRACE_DEPLOY_MODEL_H\n\n";
    s += "#include <stddef.h>\n\n";
    s += "#if defined(__cplusplus)\n#define MEMTRACE_ALIGN16 alignas(16)\n";
    s += &format!("constexpr size_t kTensorArenaSize = {};\n", arena.bytes);
    s += &format!("constexpr size_t kModelSize = {};\n", model.len());
    s += "#else\n#define MEMTRACE_ALIGN16 _Alignas(16)\n";
    s += &format!(
        "enum {{ kTensorArenaSize = {}, kModelSize = {} }};\n",
        arena.bytes,
        model.len()
    );
    s += "#endif\n\n";
    s += &resolver;
    s += "/* The .tflite with its plan, aligned as TFLM reads its flatbuffer. */\n";
    s += "MEMTRACE_ALIGN16 static const unsigned char kModel[] = {\n";
    for line in model.chunks(16) {
        s += "   ";
        for b in line {
            s += &format!(" 0x{b:02x},");
        }
        s += "\n";
    }
    s += "};\n\n#endif /* MEMTRACE_DEPLOY_MODEL_H */\n";
    Ok(s)
}

/// Writes the model with its plan to `dest` and its header beside it
/// ([`header_path`]), each atomically; both texts are complete before
/// either file is written. Returns the header's path.
pub(crate) fn write_deployment(
    dest: &Path,
    model: &[u8],
    arena: &ArenaToAllocate,
    who: &Provenance<'_>,
) -> Result<PathBuf> {
    use memtrace_io::output::{write_atomically, write_error};
    if let Some(why) = deployment_refusal(dest) {
        bail!("{why}");
    }
    let header = header_path(dest);
    check_output(&header, &[dest, Path::new(who.source)])?;
    let text = header_text(model, arena, who)?;
    for (path, bytes) in [(dest, model), (header.as_path(), text.as_bytes())] {
        write_atomically(path, |w| {
            std::io::Write::write_all(w, bytes).map_err(|e| write_error(path, e))
        })?;
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_the_comment_can_neither_end_it_nor_start_a_line() {
        for (name, written) in [
            ("dir*/m.tflite", "dir*\\/m.tflite"),
            ("a/*b", "a/\\*b"),
            ("x\n#error no\n", "x\\n#error no\\n"),
            ("back\\", "back\\\\"),
            ("tri??/", "tri?\\?/"),
            ("cr\r\t\u{7f}\0", "cr\\r\\t\\x7f\\x00"),
            ("mod\u{e8}le\u{202e}", "mod\\u{e8}le\\u{202e}"),
            ("plain/path-1_2.tflite", "plain/path-1_2.tflite"),
        ] {
            assert_eq!(c_comment(name), written, "{name:?}");
        }
    }

    #[test]
    fn builtins_map_to_their_resolver_methods() {
        for (name, method) in [
            ("CONV_2D", "AddConv2D"),
            ("DEPTHWISE_CONV_2D", "AddDepthwiseConv2D"),
            ("FULLY_CONNECTED", "AddFullyConnected"),
            ("AVERAGE_POOL_2D", "AddAveragePool2D"),
            ("L2_NORMALIZATION", "AddL2Normalization"),
            ("SOFTMAX", "AddSoftmax"),
            ("PADV2", "AddPadV2"),
            (
                "UNIDIRECTIONAL_SEQUENCE_LSTM",
                "AddUnidirectionalSequenceLSTM",
            ),
        ] {
            assert_eq!(resolver_method(name).as_deref(), Some(method));
        }
        assert_eq!(resolver_method("TFLite_Detection_PostProcess"), None);
        assert_eq!(resolver_method(""), None);
    }
}
