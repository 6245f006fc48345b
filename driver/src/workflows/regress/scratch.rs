//! The class `regress --unit-tests` exists to catch: a CMSIS-NN call whose
//! scratch, sized by the library's own `*_get_buffer_size`, is smaller
//! than what its kernel uses. memcheck sees the kernel's accesses past the
//! heap block; here such a finding becomes the call's: its API function,
//! the kernel that made the access, its call site and shapes, the bytes
//! the block holds (what the size function asked for) and the bytes the
//! kernel reached (one past the farthest byte it touched).

use memtrace_tracer::error::CodeLocation;
use memtrace_tracer::program::{Finding, FindingKind};
use serde::Serialize;

use crate::workflows::check::{CallReport, CheckReport};

/// One call's scratch as the kernel used it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ScratchUse {
    /// The function that made the farthest access: the API function, or
    /// the kernel a wrapper ran (`arm_convolve_s8`).
    pub kernel: String,
    /// Bytes of the heap block at `ctx->buf`: what the size function
    /// returned, as the program allocated it.
    pub asked_bytes: u64,
    /// One past the farthest byte of the block's overrun, from its start.
    pub used_bytes: u64,
}

/// A call whose scratch one build or both overran, paired by API
/// function, call site and shapes.
#[derive(Clone, Debug, Serialize)]
pub struct ScratchOverrun {
    /// The API function called.
    pub function: String,
    /// Where the program calls it: `function (file:line)`.
    pub site: String,
    /// The shapes its arguments give.
    pub shapes: String,
    /// The old build's use, if it overran.
    pub old: Option<ScratchUse>,
    /// The new build's use, if it overran.
    pub new: Option<ScratchUse>,
    /// The other build makes the same call (so "within its scratch" holds).
    pub paired: bool,
}

impl ScratchOverrun {
    /// A new overrun fails the comparison.
    pub fn fails(&self) -> bool {
        self.new.is_some() && self.old.is_none()
    }

    /// One build overran and the other did not: a difference between
    /// the builds. An overrun in both is a defect the new build keeps,
    /// reported but not a change.
    pub(crate) fn is_change(&self) -> bool {
        self.old.is_some() != self.new.is_some()
    }

    /// The report's line.
    pub fn line(&self) -> String {
        let call = format!("`{}` at {}, {}", self.function, self.site, self.shapes);
        let other = if self.paired {
            "stays within its scratch"
        } else {
            "is not made"
        };
        match (&self.old, &self.new) {
            (None, Some(n)) => format!(
                "scratch overrun in the new build: {call}: {}; the old build's call {other}",
                use_text(n)
            ),
            (Some(o), None) => format!(
                "scratch overrun fixed: {call}: in the old build {}; the new build's call {other}",
                use_text(o)
            ),
            (Some(o), Some(n)) => format!(
                "scratch overrun in both builds: {call}: old {}; new {}",
                use_text(o),
                use_text(n)
            ),
            (None, None) => format!("no scratch overrun: {call}"),
        }
    }
}

fn use_text(u: &ScratchUse) -> String {
    format!(
        "the size function asked for {} B, {} used {} B",
        u.asked_bytes, u.kernel, u.used_bytes
    )
}

/// The scratch overruns of both runs, each call once, old ones first.
pub(super) fn compare(old: &CheckReport, new: &CheckReport) -> Vec<ScratchOverrun> {
    let (a, b) = (overruns(old), overruns(new));
    let mut out: Vec<ScratchOverrun> = Vec::new();
    for (call, u) in &a {
        let twin = b.iter().find(|(c, _)| same_call(c, call));
        out.push(overrun(
            call,
            Some(u.clone()),
            twin.map(|(_, u)| u.clone()),
            makes(new, call),
        ));
    }
    for (call, u) in b
        .iter()
        .filter(|(c, _)| !a.iter().any(|(o, _)| same_call(o, c)))
    {
        out.push(overrun(call, None, Some(u.clone()), makes(old, call)));
    }
    out
}

fn overrun(
    call: &CallReport,
    old: Option<ScratchUse>,
    new: Option<ScratchUse>,
    paired: bool,
) -> ScratchOverrun {
    ScratchOverrun {
        function: call.call.function.to_string(),
        site: site(&call.call.call_site),
        shapes: call.call.shapes.clone(),
        old,
        new,
        paired,
    }
}

/// Whether `report` makes the call `call` is (function, site, shapes).
fn makes(report: &CheckReport, call: &CallReport) -> bool {
    report.calls.iter().flatten().any(|c| same_call(c, call))
}

fn same_call(a: &CallReport, b: &CallReport) -> bool {
    a.call.function == b.call.function
        && same_place(&a.call.call_site, &b.call.call_site)
        && a.call.shapes == b.call.shapes
}

fn same_place(a: &CodeLocation, b: &CodeLocation) -> bool {
    a.function == b.function && a.file == b.file && a.line == b.line
}

fn site(at: &CodeLocation) -> String {
    let function = at.function.as_deref().unwrap_or("?");
    match (&at.file, at.line) {
        (Some(file), Some(line)) => format!("{function} ({file}:{line})"),
        _ => format!("{function} (pc {:#x})", at.pc),
    }
}

/// The calls of one run whose scratch memcheck saw overrun past its end,
/// in call order, each with its farthest use.
fn overruns(report: &CheckReport) -> Vec<(&CallReport, ScratchUse)> {
    let Some(calls) = &report.calls else {
        return Vec::new();
    };
    let mut out: Vec<(usize, ScratchUse)> = Vec::new();
    for finding in &report.findings {
        let Some((index, u)) = scratch_use(calls, finding) else {
            continue;
        };
        match out.iter_mut().find(|(i, _)| *i == index) {
            Some((_, seen)) if seen.used_bytes < u.used_bytes => *seen = u,
            Some(_) => {}
            None => out.push((index, u)),
        }
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(i, u)| (&calls[i], u)).collect()
}

/// The call whose scratch `finding` overran past its end, and how far:
/// a live heap block at one of the call's `ctx->buf`, reached from inside
/// the call (its call site is in the finding's chain).
fn scratch_use(calls: &[CallReport], finding: &Finding) -> Option<(usize, ScratchUse)> {
    if finding.kind != FindingKind::Overrun {
        return None;
    }
    let block = finding.block.as_ref().filter(|b| b.freed.is_none())?;
    let (_, end) = finding.outside?;
    let block_end = block.address + block.size;
    if end <= block_end {
        return None;
    }
    let index = calls.iter().position(|c| {
        c.call.scratch.contains(&block.address)
            && finding
                .chain
                .iter()
                .skip(1)
                .any(|f| same_place(f, &c.call.call_site))
    })?;
    Some((
        index,
        ScratchUse {
            kernel: kernel(&calls[index], &finding.chain),
            asked_bytes: block.size,
            used_bytes: end - block.address,
        },
    ))
}

/// The innermost frame of `chain` that is the call's API function or one
/// it called (a wrapper's kernel); the API function when none is.
fn kernel(call: &CallReport, chain: &[CodeLocation]) -> String {
    let ours = |name: &str| {
        name == call.call.function || call.call.inner_calls.iter().any(|i| i.function == name)
    };
    chain
        .iter()
        .filter_map(|f| f.function.as_deref())
        .find(|name| ours(name))
        .unwrap_or(call.call.function)
        .to_string()
}
