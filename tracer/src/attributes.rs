//! What an Arm executable says it was built for: its `.ARM.attributes`
//! (the "aeabi" build attributes of the Arm ABI's addenda), read into the
//! architecture, DSP extension and FPU it needs, and checked against the
//! Cortex-M core a run emulates. A Cortex-M4 binary on a Cortex-M0 would
//! otherwise run until its first Thumb-2 instruction and stop there as an
//! "undefined instruction" far from the reason.
//!
//! `object` splits the section into vendor subsections and attribute lists;
//! which tag carries a number and which a string is the Arm ABI's rule,
//! applied here.

use object::elf::FileHeader32;
use object::read::elf::AttributesSection;
use object::LittleEndian;

use memtrace_abi::target::Arch;

/// The Arm architecture profile a Cortex-M binary was compiled for, from
/// the smallest; each runs on the cores whose architecture implements it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// ARMv6-M (`Tag_CPU_arch` 11, 12): Thumb-1 plus a few 32-bit
    /// instructions; Cortex-M0, M0+, M1.
    V6M,
    /// ARMv8-M Baseline (16): ARMv6-M plus division and exclusives; M23.
    V8MBase,
    /// ARMv7-M (10 with profile M): Thumb-2; Cortex-M3.
    V7M,
    /// ARMv7E-M (13): ARMv7-M with the DSP extension; Cortex-M4, M7.
    V7EM,
    /// ARMv8-M Mainline (17): Thumb-2, DSP optional; Cortex-M33, M35P, M55.
    V8MMain,
    /// ARMv8.1-M Mainline (21): adds MVE (Helium); Cortex-M55, M85.
    V81MMain,
}

impl Isa {
    /// Its name in Arm's documents.
    pub fn name(self) -> &'static str {
        match self {
            Isa::V6M => "ARMv6-M",
            Isa::V8MBase => "ARMv8-M Baseline",
            Isa::V7M => "ARMv7-M",
            Isa::V7EM => "ARMv7E-M",
            Isa::V8MMain => "ARMv8-M Mainline",
            Isa::V81MMain => "ARMv8.1-M Mainline",
        }
    }

    /// Whether a core of this architecture runs code compiled for `code`
    /// (the DSP extension, which ARMv7E-M code may use, is checked apart).
    fn implements(self, code: Isa) -> bool {
        use Isa::*;
        match self {
            V6M => code == V6M,
            V8MBase => matches!(code, V6M | V8MBase),
            V7M => matches!(code, V6M | V7M),
            V7EM => matches!(code, V6M | V7M | V7EM),
            V8MMain => matches!(code, V6M | V8MBase | V7M | V7EM | V8MMain),
            V81MMain => true,
        }
    }
}

/// A floating-point unit, as much of it as code may need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fpu {
    /// 2 VFPv2, 3 VFPv3, 4 VFPv4, 5 FPv5 (Arm's numbering of `Tag_FP_arch`
    /// versions, Armv8's FP being FPv5 on a Cortex-M).
    pub version: u8,
    /// Double precision.
    pub double: bool,
    /// 32 double registers (no Cortex-M FPU has more than 16).
    pub d32: bool,
}

impl Fpu {
    fn name(self) -> String {
        let version = match self.version {
            5 => "FPv5".to_owned(),
            v => format!("VFPv{v}"),
        };
        let precision = if self.double { "" } else { "-SP" };
        let regs = if self.d32 { "-D32" } else { "-D16" };
        format!("{version}{precision}{regs}")
    }
}

/// What an executable needs of the core, from its build attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArmBuild {
    /// Its architecture (`Tag_CPU_arch`; `None` when it names none).
    pub isa: Option<Isa>,
    /// `Tag_CPU_arch` when it is no Cortex-M architecture, or the profile
    /// (`Tag_CPU_arch_profile`) is A or R: such code does not run here.
    pub foreign: Option<String>,
    /// The DSP extension (`Tag_DSP_extension`, or implied by ARMv7E-M).
    pub dsp: bool,
    /// The FPU its instructions need (`Tag_FP_arch`, with
    /// `Tag_ABI_HardFP_use` saying single precision only).
    pub fpu: Option<Fpu>,
    /// Advanced SIMD (NEON, `Tag_Advanced_SIMD_arch`) or MVE (`Tag_MVE_arch`).
    pub vector: Option<&'static str>,
    /// The core the compiler was told (`Tag_CPU_name`, e.g. `Cortex-M7`).
    pub cpu_name: Option<String>,
}

// Tags of the "aeabi" vendor subsection (Arm IHI 0045, "Addenda to the Arm
// ABI", section 3.3).
const TAG_FILE: u8 = 1;
const TAG_CPU_RAW_NAME: u64 = 4;
const TAG_CPU_NAME: u64 = 5;
const TAG_CPU_ARCH: u64 = 6;
const TAG_CPU_ARCH_PROFILE: u64 = 7;
const TAG_FP_ARCH: u64 = 10;
const TAG_ADVANCED_SIMD_ARCH: u64 = 12;
const TAG_ABI_HARDFP_USE: u64 = 27;
const TAG_COMPATIBILITY: u64 = 32;
const TAG_DSP_EXTENSION: u64 = 46;
const TAG_MVE_ARCH: u64 = 48;

/// The vector extension of the Cortex-M55 and M85, as messages name it.
const MVE: &str = "MVE (Helium)";
const TAG_ALSO_COMPATIBLE_WITH: u64 = 65;
const TAG_CONFORMANCE: u64 = 67;

/// Whether the value of `tag` is a NUL-terminated string (the rest are
/// ULEB128 numbers; `Tag_compatibility` is a number then a string).
fn is_string_tag(tag: u64) -> bool {
    match tag {
        TAG_CPU_RAW_NAME | TAG_CPU_NAME | TAG_ALSO_COMPATIBLE_WITH | TAG_CONFORMANCE => true,
        // Below 32 every other known tag is a number; from 32 on, odd tags
        // are strings and even ones numbers, so unknown tags can be skipped.
        t if t < 32 => false,
        t => t % 2 == 1,
    }
}

/// The raw attributes of the file scope that matter here, by tag.
#[derive(Default)]
struct Raw {
    cpu_name: Option<String>,
    cpu_arch: Option<u64>,
    profile: Option<u64>,
    fp_arch: u64,
    simd: u64,
    hardfp_use: u64,
    dsp: Option<u64>,
    mve: u64,
}

/// Reads the "aeabi" file-scope attributes of `data` (the section's bytes).
fn read_raw(data: &[u8]) -> Result<Raw, String> {
    let bad = |e: object::Error| format!("malformed .ARM.attributes: {e}");
    let section =
        AttributesSection::<FileHeader32<LittleEndian>>::new(LittleEndian, data).map_err(bad)?;
    let mut raw = Raw::default();
    let mut subsections = section.subsections().map_err(bad)?;
    while let Some(sub) = subsections.next().map_err(bad)? {
        if sub.vendor() != b"aeabi" {
            continue;
        }
        let mut subsubs = sub.subsubsections();
        while let Some(subsub) = subsubs.next().map_err(bad)? {
            if subsub.tag() != object::elf::AttributeTag(TAG_FILE) {
                continue;
            }
            let mut reader = subsub.attributes();
            while let Some(tag) = reader.read_tag().map_err(bad)? {
                if tag == TAG_COMPATIBILITY {
                    reader.read_integer().map_err(bad)?;
                    reader.read_string().map_err(bad)?;
                    continue;
                }
                if is_string_tag(tag) {
                    let text = reader.read_string().map_err(bad)?;
                    if tag == TAG_CPU_NAME {
                        raw.cpu_name = Some(String::from_utf8_lossy(text).into_owned());
                    }
                    continue;
                }
                let value = reader.read_integer().map_err(bad)?;
                match tag {
                    TAG_CPU_ARCH => raw.cpu_arch = Some(value),
                    TAG_CPU_ARCH_PROFILE => raw.profile = Some(value),
                    TAG_FP_ARCH => raw.fp_arch = value,
                    TAG_ADVANCED_SIMD_ARCH => raw.simd = value,
                    TAG_ABI_HARDFP_USE => raw.hardfp_use = value,
                    TAG_DSP_EXTENSION => raw.dsp = Some(value),
                    TAG_MVE_ARCH => raw.mve = value,
                    _ => {}
                }
            }
        }
    }
    Ok(raw)
}

/// The FPU `Tag_FP_arch` = `fp_arch` needs (`None` for 0, no FPU code);
/// `hardfp_use` 1 means single precision only.
fn fpu_of(fp_arch: u64, hardfp_use: u64) -> Option<Fpu> {
    let (version, d32) = match fp_arch {
        0 => return None,
        1 | 2 => (2, false),
        3 => (3, true),
        4 => (3, false),
        5 => (4, true),
        6 => (4, false),
        7 => (5, true),
        _ => (5, false),
    };
    Some(Fpu {
        version,
        double: hardfp_use != 1,
        d32,
    })
}

impl ArmBuild {
    /// The build an Arm executable's `.ARM.attributes` bytes describe.
    pub fn parse(data: &[u8]) -> Result<ArmBuild, String> {
        let raw = read_raw(data)?;
        let isa = match raw.cpu_arch {
            None | Some(0) => None,
            Some(10) if raw.profile == Some(u64::from(b'M')) => Some(Isa::V7M),
            Some(11 | 12) => Some(Isa::V6M),
            Some(13) => Some(Isa::V7EM),
            Some(16) => Some(Isa::V8MBase),
            Some(17) => Some(Isa::V8MMain),
            Some(21) => Some(Isa::V81MMain),
            Some(_) => None,
        };
        let foreign = match (raw.cpu_arch, raw.profile.map(|p| p as u8)) {
            (_, Some(p @ (b'A' | b'R'))) => Some(format!("the {} profile", p as char)),
            (Some(a), _) if a != 0 && isa.is_none() => {
                Some(format!("Tag_CPU_arch {a}, no M-profile architecture"))
            }
            _ => None,
        };
        let vector = if raw.mve != 0 {
            Some(MVE)
        } else if raw.simd != 0 {
            Some("Advanced SIMD (NEON)")
        } else {
            None
        };
        Ok(ArmBuild {
            isa,
            foreign,
            dsp: raw.dsp == Some(1) || isa == Some(Isa::V7EM),
            fpu: fpu_of(raw.fp_arch, raw.hardfp_use),
            vector,
            cpu_name: raw.cpu_name,
        })
    }

    /// The core a run of this build emulates unless told otherwise: the one
    /// `Tag_CPU_name` names when it runs the build, else the smallest core
    /// that does (an ARMv7E-M build on the M4 unless it needs the M7's
    /// double precision).
    pub fn default_core(&self) -> Option<Arch> {
        let named = self.cpu_name.as_deref().and_then(|n| {
            let n = n.to_ascii_lowercase().replace('+', "plus");
            Arch::from_name(&n)
        });
        named
            .into_iter()
            .chain(CORTEX_M)
            .find(|&core| self.refusal(core).is_none())
    }

    /// Why this build cannot run on `core`, or `None` when it can.
    pub fn refusal(&self, core: Arch) -> Option<String> {
        let Some(have) = Core::of(core) else {
            return Some(format!("{} is no Cortex-M core", core.name()));
        };
        if let Some(foreign) = &self.foreign {
            return Some(format!("it was built for {foreign}"));
        }
        if let Some(vector) = self.vector.filter(|v| !(have.mve && *v == MVE)) {
            return Some(format!(
                "it uses {vector}, which the {} does not have",
                core.name()
            ));
        }
        if let Some(isa) = self.isa {
            if !have.isa.implements(isa) {
                return Some(format!(
                    "it was built for {}{}, and the {} implements {}",
                    isa.name(),
                    self.named(),
                    core.name(),
                    have.isa.name()
                ));
            }
        }
        if self.dsp && !have.dsp {
            return Some(format!(
                "it uses the DSP extension{}, which the {} does not have",
                self.named(),
                core.name()
            ));
        }
        if let Some(need) = self.fpu {
            let fits = have.fpu.is_some_and(|f| {
                f.version >= need.version && (f.double || !need.double) && !need.d32
            });
            if !fits {
                let has = have.fpu.map_or_else(|| "no FPU".to_owned(), |f| f.name());
                return Some(format!(
                    "it uses a {} FPU{}, and the {} has {has}",
                    need.name(),
                    self.named(),
                    core.name()
                ));
            }
        }
        None
    }

    /// " (-mcpu=NAME)" when the build names its core, for messages.
    fn named(&self) -> String {
        self.cpu_name
            .as_deref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    }
}

/// The Cortex-M targets, smallest first.
const CORTEX_M: [Arch; 6] = [
    Arch::CortexM0,
    Arch::CortexM3,
    Arch::CortexM4,
    Arch::CortexM7,
    Arch::CortexM33,
    Arch::CortexM55,
];

/// What a Cortex-M target implements, as its emulator models it.
struct Core {
    isa: Isa,
    dsp: bool,
    fpu: Option<Fpu>,
    /// Helium (MVE).
    mve: bool,
}

impl Core {
    fn of(arch: Arch) -> Option<Core> {
        let fpu = |version, double| {
            Some(Fpu {
                version,
                double,
                d32: false,
            })
        };
        Some(match arch {
            Arch::CortexM0 => Core {
                isa: Isa::V6M,
                dsp: false,
                fpu: None,
                mve: false,
            },
            Arch::CortexM3 => Core {
                isa: Isa::V7M,
                dsp: false,
                fpu: None,
                mve: false,
            },
            Arch::CortexM4 => Core {
                isa: Isa::V7EM,
                dsp: true,
                fpu: fpu(4, false),
                mve: false,
            },
            Arch::CortexM7 => Core {
                isa: Isa::V7EM,
                dsp: true,
                fpu: fpu(5, true),
                mve: false,
            },
            Arch::CortexM33 => Core {
                isa: Isa::V8MMain,
                dsp: true,
                fpu: fpu(5, false),
                mve: false,
            },
            Arch::CortexM55 => Core {
                isa: Isa::V81MMain,
                dsp: true,
                fpu: fpu(5, true),
                mve: true,
            },
            Arch::Riscv32 | Arch::X86_64 => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An "aeabi" attributes section with one file-scope list of
    /// `(tag, value)` numbers and an optional `Tag_CPU_name`.
    fn section(cpu_name: Option<&str>, numbers: &[(u8, u8)]) -> Vec<u8> {
        let mut attrs = Vec::new();
        if let Some(name) = cpu_name {
            attrs.push(TAG_CPU_NAME as u8);
            attrs.extend_from_slice(name.as_bytes());
            attrs.push(0);
        }
        for &(tag, value) in numbers {
            attrs.extend_from_slice(&[tag, value]);
        }
        let mut file = vec![TAG_FILE];
        file.extend_from_slice(&(5 + attrs.len() as u32).to_le_bytes());
        file.extend_from_slice(&attrs);
        let mut sub = Vec::new();
        sub.extend_from_slice(&(4 + 6 + file.len() as u32).to_le_bytes());
        sub.extend_from_slice(b"aeabi\0");
        sub.extend_from_slice(&file);
        let mut out = vec![b'A'];
        out.extend_from_slice(&sub);
        out
    }

    #[test]
    fn an_armv7em_hard_float_build_needs_the_m4_or_more() {
        // -mcpu=cortex-m4 -mfpu=fpv4-sp-d16 -mfloat-abi=hard.
        let data = section(Some("cortex-m4"), &[(6, 13), (7, b'M'), (10, 6), (27, 1)]);
        let build = ArmBuild::parse(&data).unwrap();
        assert_eq!(build.isa, Some(Isa::V7EM));
        assert!(build.dsp);
        assert_eq!(build.default_core(), Some(Arch::CortexM4));
        let m0 = build.refusal(Arch::CortexM0).unwrap();
        assert!(m0.contains("ARMv7E-M") && m0.contains("ARMv6-M"), "{m0}");
        assert!(build.refusal(Arch::CortexM3).unwrap().contains("ARMv7-M"));
        for core in [Arch::CortexM4, Arch::CortexM7, Arch::CortexM33] {
            assert_eq!(build.refusal(core), None, "{core}");
        }
    }

    #[test]
    fn double_precision_needs_the_m7() {
        // -mcpu=cortex-m7 -mfpu=fpv5-d16: Tag_FP_arch 8, no HardFP_use.
        let data = section(Some("cortex-m7"), &[(6, 13), (7, b'M'), (10, 8)]);
        let build = ArmBuild::parse(&data).unwrap();
        assert_eq!(build.default_core(), Some(Arch::CortexM7));
        let m4 = build.refusal(Arch::CortexM4).unwrap();
        assert!(
            m4.contains("FPv5-D16") && m4.contains("VFPv4-SP-D16"),
            "{m4}"
        );
        assert!(build.refusal(Arch::CortexM33).unwrap().contains("FPv5-SP"));
    }

    #[test]
    fn armv6m_code_runs_everywhere_and_names_its_core() {
        let data = section(Some("cortex-m0plus"), &[(6, 12), (7, b'M')]);
        let build = ArmBuild::parse(&data).unwrap();
        assert_eq!(build.default_core(), Some(Arch::CortexM0));
        for core in CORTEX_M {
            assert_eq!(build.refusal(core), None, "{core}");
        }
        assert!(build.refusal(Arch::X86_64).is_some());
    }

    #[test]
    fn a_profile_code_is_refused_and_m33_without_dsp_is_told_apart() {
        let a = ArmBuild::parse(&section(None, &[(6, 10), (7, b'A')])).unwrap();
        assert!(a.refusal(Arch::CortexM4).unwrap().contains("A profile"));
        let nodsp = ArmBuild::parse(&section(None, &[(6, 17), (7, b'M'), (46, 0)])).unwrap();
        assert!(!nodsp.dsp);
        assert_eq!(nodsp.default_core(), Some(Arch::CortexM33));
        assert!(nodsp.refusal(Arch::CortexM7).unwrap().contains("ARMv8-M"));
    }

    #[test]
    fn malformed_sections_are_errors() {
        assert!(ArmBuild::parse(b"B").is_err());
        let mut data = section(None, &[(6, 13)]);
        data.truncate(data.len() - 3);
        assert!(ArmBuild::parse(&data).is_err());
    }
}
