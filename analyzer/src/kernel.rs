//! Which kernel library and which function ran a layer, from the code that
//! made its buffer accesses (docs/kernels.md, "Which kernel ran a layer").
//!
//! The analyzer never reads an ELF: the caller resolves each PC to its chain
//! of inlined functions (name and DWARF source file, innermost first), and
//! this module applies the rules:
//!
//! * the **library** of a function is read from its source file's path
//!   ([`Library::of_path`]);
//! * a PC is attributed to the *outermost* function of its chain that belongs
//!   to a kernel library (CMSIS-NN or the TFLM reference kernels), so helpers
//!   inlined into a kernel (`Offset`, `arm_nn_read_s8x4`) count for the kernel,
//!   and a reference kernel inlined into the harness's glue still counts for
//!   itself; with no kernel-library function in the chain, to the innermost
//!   function;
//! * the layer's **kernel** is the kernel-library function with the most
//!   accesses; helpers outside the kernel libraries that a kernel calls
//!   (the harness's `memcpy`, which CMSIS-NN's `arm_memcpy_s8` calls) are
//!   listed but named the kernel only when no kernel-library function
//!   accessed the layer's buffers at all. The layer's **library** is the
//!   kernel's.

use serde::Serialize;

/// A kernel library, as told by the source path of a function. Reports
/// write it by its [`Library::name`] (serde and `Display` alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Library {
    /// Arm CMSIS-NN (`arm_*` functions of a CMSIS-NN checkout).
    #[serde(rename = "CMSIS-NN")]
    CmsisNn,
    /// TensorFlow Lite (Micro)'s reference kernels and their helpers.
    #[serde(rename = "TFLM reference")]
    TflmReference,
    /// memtrace's own guest code (`harness-c/`: relu, matmul, glue, libc shims).
    #[serde(rename = "harness-c")]
    Harness,
    /// Anything else, or a function without a source file.
    #[serde(rename = "unknown")]
    Unknown,
}

impl std::fmt::Display for Library {
    /// The [`Library::name`], padded as the format asks.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

impl Library {
    /// The name reports use: `CMSIS-NN`, `TFLM reference`, `harness-c`, `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            Library::CmsisNn => "CMSIS-NN",
            Library::TflmReference => "TFLM reference",
            Library::Harness => "harness-c",
            Library::Unknown => "unknown",
        }
    }

    /// The library a source file belongs to, by its path, first rule that
    /// matches (case-insensitive, `\` read as `/`):
    ///
    /// 1. a directory named `cmsis-nn`, `cmsis_nn` or `CMSIS/NN`, or a file
    ///    named `arm_nn*` / `arm_*_s8*` / `arm_*_s16*` / `arm_*_s4*`
    ///    (CMSIS-NN's naming) → CMSIS-NN;
    /// 2. `tensorflow/lite/kernels/` or `tensorflow/lite/micro/kernels/` →
    ///    TFLM reference;
    /// 3. a directory named `harness-c` → harness-c;
    /// 4. otherwise (or no path) → unknown.
    pub fn of_path(path: Option<&str>) -> Library {
        let Some(path) = path else {
            return Library::Unknown;
        };
        let p = path.replace('\\', "/").to_ascii_lowercase();
        let dirs: Vec<&str> = p.split('/').collect();
        let file = dirs.last().copied().unwrap_or("");
        let dirs = &dirs[..dirs.len().saturating_sub(1)];
        let arm_name = file.starts_with("arm_")
            && (file.starts_with("arm_nn")
                || ["_s8", "_s16", "_s4"].iter().any(|t| file.contains(t)));
        if dirs.iter().any(|d| *d == "cmsis-nn" || *d == "cmsis_nn")
            || p.contains("cmsis/nn/")
            || arm_name
        {
            Library::CmsisNn
        } else if p.contains("tensorflow/lite/kernels/")
            || p.contains("tensorflow/lite/micro/kernels/")
        {
            Library::TflmReference
        } else if dirs.contains(&"harness-c") {
            Library::Harness
        } else {
            Library::Unknown
        }
    }

    /// CMSIS-NN or the TFLM reference kernels.
    pub fn is_kernel_library(self) -> bool {
        matches!(self, Library::CmsisNn | Library::TflmReference)
    }
}

/// One function of the chain at a PC, as the caller resolved it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeFrame {
    /// Demangled name, if known.
    pub function: Option<String>,
    /// Full path of its source file, if known.
    pub file: Option<String>,
}

/// The function (short name) and library a PC's accesses count for, from its
/// chain of functions, innermost first; `None` for an empty chain.
pub fn attribute(frames: &[CodeFrame]) -> Option<(String, Library)> {
    let libraries: Vec<Library> = frames
        .iter()
        .map(|f| Library::of_path(f.file.as_deref()))
        .collect();
    let i = libraries
        .iter()
        .rposition(|l| l.is_kernel_library())
        .unwrap_or(0);
    let frame = frames.get(i)?;
    let name = frame
        .function
        .as_deref()
        .map_or_else(|| "?".to_owned(), short_name);
    Some((name, libraries[i]))
}

/// A demangled C++ name without its parameter list, qualifiers after it and
/// return type: `void ns::f<int>(int const&) const` → `ns::f<int>`. C names
/// come back unchanged.
pub fn short_name(demangled: &str) -> String {
    const ANON: &str = "(anonymous namespace)";
    let text = demangled.replace(ANON, "\u{1}");
    let (mut angle, mut paren) = (0i32, 0i32);
    let mut start = 0;
    let mut end = text.len();
    for (i, c) in text.char_indices() {
        match c {
            '<' => angle += 1,
            '>' => angle -= 1,
            '(' if angle == 0 && paren == 0 && !text[..i].ends_with("operator") => {
                end = i;
                break;
            }
            '(' => paren += 1,
            ')' => paren -= 1,
            ' ' if angle == 0 && paren == 0 && !text[..i].ends_with("operator") => start = i + 1,
            _ => {}
        }
    }
    text[start..end].replace('\u{1}', ANON)
}

/// The layer's kernel report from its `(pc, accesses)` counts and a resolver
/// of PCs to function chains (innermost first): the kernel-library function
/// with most accesses, else the function with most accesses. Unresolved PCs
/// count for a function `?` of library `unknown`.
pub fn kernel_report(
    counts: &[(u64, u64)],
    mut frames_at: impl FnMut(u64) -> Vec<CodeFrame>,
) -> KernelReport {
    let mut per: Vec<(String, Library, u64)> = Vec::new();
    for &(pc, n) in counts {
        let (name, library) =
            attribute(&frames_at(pc)).unwrap_or_else(|| ("?".to_owned(), Library::Unknown));
        match per.iter_mut().find(|(f, l, _)| *f == name && *l == library) {
            Some(entry) => entry.2 += n,
            None => per.push((name, library, n)),
        }
    }
    per.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    let (kernel, library) = per
        .iter()
        .find(|(_, l, _)| l.is_kernel_library())
        .or(per.first())
        .map_or((String::new(), Library::Unknown), |(f, l, _)| {
            (f.clone(), *l)
        });
    KernelReport {
        library,
        kernel,
        functions: per
            .into_iter()
            .map(|(function, library, accesses)| FunctionAccesses {
                function,
                library,
                accesses,
            })
            .collect(),
    }
}

/// The code behind a layer's buffer accesses (docs/kernels.md, "Which kernel
/// ran a layer").
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct KernelReport {
    /// Kernel library of `kernel`: `CMSIS-NN`, `TFLM reference`, `harness-c`
    /// or `unknown`, from the function's DWARF source file.
    pub library: Library,
    /// The function that made most of the layer's buffer accesses (loads,
    /// stores and updates of every declared buffer), preferring functions
    /// of a kernel library over helpers such as `memcpy`; empty without
    /// accesses.
    pub kernel: String,
    /// Every function that accessed the layer's buffers, most accesses first.
    pub functions: Vec<FunctionAccesses>,
}

/// Buffer accesses of a layer made by one function.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FunctionAccesses {
    /// Function name (C++ names without parameters or return type).
    pub function: String,
    /// Its kernel library.
    pub library: Library,
    /// Events (loads, stores, updates) it made.
    pub accesses: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, file: &str) -> CodeFrame {
        CodeFrame {
            function: Some(function.to_owned()),
            file: Some(file.to_owned()),
        }
    }

    const TFLM_CONV: &str = "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tfmicro-0.1.0/submodules/tensorflow/tensorflow/lite/kernels/internal/reference/integer_ops/conv.h";
    const TFLM_TYPES: &str = "/root/.cargo/registry/src/x/tfmicro-0.1.0/submodules/tensorflow/tensorflow/lite/kernels/internal/types.h";
    const CMSIS_MATMUL: &str =
        "/work/shared/third_party/cmsis-nn/Source/NNSupportFunctions/arm_nn_mat_mult_nt_t_s8.c";
    const HARNESS: &str = "/work/wt-kernels/harness-c/suite/kernels.cc";

    #[test]
    fn libraries_are_read_from_the_source_path() {
        for (path, want) in [
            (CMSIS_MATMUL, Library::CmsisNn),
            (
                "C:\\src\\CMSIS-NN\\Include\\arm_nnsupportfunctions.h",
                Library::CmsisNn,
            ),
            ("/opt/CMSIS_5/CMSIS/NN/Source/x.c", Library::CmsisNn),
            ("/elsewhere/arm_convolve_s8.c", Library::CmsisNn),
            (TFLM_CONV, Library::TflmReference),
            (
                "/tflm/tensorflow/lite/micro/kernels/add.cc",
                Library::TflmReference,
            ),
            (HARNESS, Library::Harness),
            (
                "/work/wt-kernels/harness-c/rt/libc_shims.c",
                Library::Harness,
            ),
            (
                "/usr/lib/gcc/arm-none-eabi/13/include/arm_acle.h",
                Library::Unknown,
            ),
            ("/home/me/model/kernel.c", Library::Unknown),
        ] {
            assert_eq!(Library::of_path(Some(path)), want, "{path}");
        }
        assert_eq!(Library::of_path(None), Library::Unknown);
    }

    #[test]
    fn the_outermost_kernel_library_function_gets_the_pc() {
        // A TFLM helper inlined into the reference kernel, inlined into the
        // harness's glue: the reference kernel.
        let chain = [
            frame("tflite::Offset(tflite::RuntimeShape const&, int, int, int, int)", TFLM_TYPES),
            frame(
                "tflite::reference_integer_ops::ConvPerChannel(tflite::ConvParams const&, int const*)",
                TFLM_CONV,
            ),
            frame("(anonymous namespace)::conv_int8(Layer&)", HARNESS),
        ];
        assert_eq!(
            attribute(&chain),
            Some((
                "tflite::reference_integer_ops::ConvPerChannel".to_owned(),
                Library::TflmReference
            ))
        );
        // Harness code alone: the innermost function, library harness-c.
        assert_eq!(
            attribute(&chain[2..]),
            Some((
                "(anonymous namespace)::conv_int8".to_owned(),
                Library::Harness
            ))
        );
        // A symbol without DWARF.
        let bare = [CodeFrame {
            function: Some("memcpy".into()),
            file: None,
        }];
        assert_eq!(
            attribute(&bare),
            Some(("memcpy".to_owned(), Library::Unknown))
        );
        assert_eq!(attribute(&[]), None);
    }

    #[test]
    fn short_names_drop_parameters_qualifiers_and_return_types() {
        for (long, short) in [
            ("arm_convolve_1x1_s8_fast", "arm_convolve_1x1_s8_fast"),
            (
                "tflite::reference_ops::DepthwiseConv(tflite::DepthwiseParams const&, float const*)",
                "tflite::reference_ops::DepthwiseConv",
            ),
            (
                "void tflite::reference_ops::Pool<float>(std::pair<int, int> const&) const",
                "tflite::reference_ops::Pool<float>",
            ),
            ("(anonymous namespace)::relu<signed char>(Layer&)", "(anonymous namespace)::relu<signed char>"),
            ("Foo::operator()(int)", "Foo::operator()"),
        ] {
            assert_eq!(short_name(long), short, "{long}");
        }
    }

    #[test]
    fn the_kernel_is_the_function_with_most_accesses_summed_over_its_pcs() {
        // Three PCs of one CMSIS-NN function (two of them through an inlined
        // header helper) outweigh the single busiest PC, in memcpy.
        let counts = [(0x10, 50), (0x20, 30), (0x30, 25), (0x40, 10), (0x50, 1)];
        let report = kernel_report(&counts, |pc| match pc {
            0x10 => vec![frame("memcpy", "/work/harness-c/rt/libc_shims.c")],
            0x20 | 0x30 => vec![
                frame(
                    "arm_nn_read_s8x4",
                    "/x/cmsis-nn/Include/arm_nnsupportfunctions.h",
                ),
                frame("arm_nn_mat_mult_nt_t_s8", CMSIS_MATMUL),
            ],
            0x40 => vec![frame("arm_nn_mat_mult_nt_t_s8", CMSIS_MATMUL)],
            _ => vec![],
        });
        assert_eq!(report.kernel, "arm_nn_mat_mult_nt_t_s8");
        assert_eq!(report.library, Library::CmsisNn);
        let rows: Vec<(&str, &str, u64)> = report
            .functions
            .iter()
            .map(|f| (f.function.as_str(), f.library.name(), f.accesses))
            .collect();
        assert_eq!(
            rows,
            [
                ("arm_nn_mat_mult_nt_t_s8", "CMSIS-NN", 65),
                ("memcpy", "harness-c", 50),
                ("?", "unknown", 1)
            ]
        );
        // The accesses are all accounted for.
        assert_eq!(
            report.functions.iter().map(|f| f.accesses).sum::<u64>(),
            counts.iter().map(|c| c.1).sum::<u64>()
        );
        // memcpy copying most of the data for a CMSIS-NN kernel (max pool
        // copies each input row into the output, then compares in place) is
        // listed first but the kernel is still the library's function.
        let pool = kernel_report(&[(0x10, 300), (0x40, 100)], |pc| match pc {
            0x10 => vec![frame("memcpy", "/work/harness-c/rt/libc_shims.c")],
            _ => vec![frame(
                "arm_max_pool_s8",
                "/x/cmsis-nn/Source/PoolingFunctions/arm_max_pool_s8.c",
            )],
        });
        assert_eq!(
            (pool.kernel.as_str(), pool.library.name()),
            ("arm_max_pool_s8", "CMSIS-NN")
        );
        assert_eq!(pool.functions[0].function, "memcpy");
        // Harness code alone (the suite's own relu): the busiest function.
        let relu = kernel_report(&[(0x10, 3), (0x20, 9)], |pc| match pc {
            0x10 => vec![frame("memset", "/work/harness-c/rt/libc_shims.c")],
            _ => vec![frame("relu_int8", HARNESS)],
        });
        assert_eq!(
            (relu.kernel.as_str(), relu.library.name()),
            ("relu_int8", "harness-c")
        );
        let empty = kernel_report(&[], |_| vec![]);
        assert_eq!(
            (empty.kernel.as_str(), empty.library.name()),
            ("", "unknown")
        );
    }
}
