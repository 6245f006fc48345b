//! Reports as the binary prints them, on strings from every Unicode class a
//! model, a guest or a path can carry: C0 controls, DEL, C1 controls, the
//! bidirectional overrides and isolates, the line and paragraph
//! separators, noncharacters, the replacement character of a non-UTF-8
//! byte, astral characters, quotes and backslashes. A JSON report made
//! safe for a terminal must stay JSON that gives back the very strings it
//! was made of; a text report must hold no character a terminal acts on.

use std::time::Instant;

use memtrace_driver::support::text::{json_terminal_safe, terminal_safe};
use memtrace_overlap::rng::Rng;
use serde_json::{json, Value};

use crate::tally::{in_process, Tally};
use crate::{scaled, seed};

/// One character of each class, drawn at random.
fn character(rng: &mut Rng) -> char {
    let pick = |rng: &mut Rng, lo: u32, hi: u32| char::from_u32(rng.range(lo, hi)).unwrap_or('?');
    match rng.range(0, 11) {
        0 => pick(rng, 0x00, 0x1f),
        1 => '\u{7f}',
        2 => pick(rng, 0x80, 0x9f),
        3 => pick(rng, 0x202a, 0x202e),
        4 => pick(rng, 0x2066, 0x2069),
        5 => *[
            '\u{200e}', '\u{200f}', '\u{2028}', '\u{2029}', '\u{feff}', '\u{fffe}',
        ]
        .get(rng.range(0, 5) as usize)
        .unwrap_or(&'?'),
        6 => '\u{fffd}',
        7 => pick(rng, 0x1_0000, 0x10_ffff),
        8 => *['"', '\\', '/', '\u{0}', '\n', '\t', '\r']
            .get(rng.range(0, 6) as usize)
            .unwrap_or(&'"'),
        _ => pick(rng, 0x20, 0x7e),
    }
}

fn string(rng: &mut Rng) -> String {
    (0..rng.range(0, 24)).map(|_| character(rng)).collect()
}

/// A report-shaped value: names in keys and values, nested.
fn report(rng: &mut Rng) -> Value {
    let names: Vec<Value> = (0..rng.range(0, 4))
        .map(|_| Value::String(string(rng)))
        .collect();
    json!({
        "program": string(rng),
        "ok": rng.chance(50),
        "stdout": string(rng),
        string(rng): string(rng),
        "tensors": names,
        "rows": [{ "name": string(rng), "bytes": rng.range(0, 1 << 20) }],
    })
}

/// A character a terminal acts on rather than shows.
fn acted_on(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn case(rng: &mut Rng) -> Result<(), String> {
    let value = report(rng);
    for pretty in [false, true] {
        let text = if pretty {
            serde_json::to_string_pretty(&value)
        } else {
            serde_json::to_string(&value)
        }
        .map_err(|e| e.to_string())?;
        let safe = json_terminal_safe(&text);
        if let Some(c) = safe.chars().find(|&c| acted_on(c) && c != '\n') {
            return Err(format!("JSON for a terminal holds a raw {c:?}"));
        }
        let back: Value = serde_json::from_str(&safe)
            .map_err(|e| format!("JSON for a terminal does not parse: {e}"))?;
        if back != value {
            return Err("JSON for a terminal gives back other strings".into());
        }
    }
    let line = string(rng);
    if let Some(c) = terminal_safe(&line).chars().find(|&c| acted_on(c)) {
        return Err(format!("text for a terminal holds a raw {c:?}"));
    }
    Ok(())
}

#[test]
pub(crate) fn fuzz_reports_on_every_unicode_class() {
    let started = Instant::now();
    let mut t = Tally::default();
    let mut rng = seed(13);
    for _ in 0..scaled(3000) {
        let mut violation = None;
        in_process(&mut t, "json", || {
            if let Err(e) = case(&mut rng) {
                violation = Some(e);
            }
            Ok(())
        });
        if let Some(v) = violation {
            t.oracle_violations += 1;
            t.failures.push(v);
        }
    }
    t.finish("json", started);
}
