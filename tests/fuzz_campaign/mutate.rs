//! Mutants: edits of a binary seed kept as a small recipe (`Edit`,
//! `Recipe`, values that break size arithmetic), and mutants of a spec text
//! or a JSON document.

use memtrace_overlap::rng::Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One edit of a seed's bytes.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Edit {
    Put { at: usize, hex: String },
    Insert { at: usize, hex: String },
    Delete { at: usize, len: usize },
    Truncate { len: usize },
}

/// A binary mutant: edits to a named seed (what `fixtures/fuzz/` keeps).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Recipe {
    pub(crate) seed: String,
    pub(crate) edits: Vec<Edit>,
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .filter_map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok())
        .collect()
}

pub(crate) fn apply(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for e in edits {
        match e {
            Edit::Put { at, hex } => {
                for (i, v) in unhex(hex).into_iter().enumerate() {
                    if let Some(x) = b.get_mut(at + i) {
                        *x = v;
                    }
                }
            }
            Edit::Insert { at, hex } => {
                let at = (*at).min(b.len());
                b.splice(at..at, unhex(hex));
            }
            Edit::Delete { at, len } => {
                let at = (*at).min(b.len());
                let end = (at + len).min(b.len());
                b.drain(at..end);
            }
            Edit::Truncate { len } => b.truncate(*len),
        }
    }
    b
}

/// Values that break size arithmetic, little-endian in `width` bytes.
pub(crate) fn interesting(rng: &mut Rng, width: usize) -> Vec<u8> {
    let random = rng.next_u64();
    let v: u64 = match width {
        1 => rng.weighted(&[(1, 0u64), (1, 1), (1, 0x7f), (1, 0x80), (1, 0xff)]),
        2 => rng.weighted(&[(1, 0u64), (1, 0xffff), (1, 0x8000), (1, 0x7fff), (1, 1)]),
        4 => rng.weighted(&[
            (2, 0u64),
            (1, 1),
            (2, 0xffff_ffff),
            (2, 0x8000_0000),
            (2, 0x7fff_ffff),
            (1, 0xffff_fff0),
            (1, 0x10000),
            (2, random & 0xffff_ffff),
        ]),
        _ => rng.weighted(&[
            (2, 0u64),
            (2, u64::MAX),
            (1, 1 << 63),
            (1, 1 << 51),
            (1, 1 << 32),
            (1, 0x7fff_ffff_ffff_ffff),
            (1, 0x8000_0000_0000),
            (2, random),
        ]),
    };
    v.to_le_bytes()[..width].to_vec()
}

/// 1–4 random edits of `base`, mostly inside `hot` ranges.
pub(crate) fn mutate(rng: &mut Rng, base: &[u8], hot: &[(usize, usize)]) -> Vec<Edit> {
    let len = base.len();
    let n = rng.range(1, 4);
    let mut edits = Vec::new();
    for _ in 0..n {
        let at = if !hot.is_empty() && rng.chance(70) {
            let (a, b) = hot[rng.range(0, hot.len() as u32 - 1) as usize];
            a + (rng.next_u64() as usize) % (b - a).max(1)
        } else {
            (rng.next_u64() as usize) % len.max(1)
        };
        let e = match rng.range(0, 9) {
            0..=2 => {
                let width = rng.weighted(&[(1, 1usize), (1, 2), (3, 4), (2, 8)]);
                Edit::Put {
                    at,
                    hex: hex(&interesting(rng, width)),
                }
            }
            3..=5 => Edit::Put {
                at,
                hex: hex(&[(rng.next_u64() & 0xff) as u8]),
            },
            6 => Edit::Insert {
                at,
                hex: hex(&(0..rng.range(1, 16))
                    .map(|_| rng.next_u64() as u8)
                    .collect::<Vec<_>>()),
            },
            7 => Edit::Delete {
                at,
                len: rng.range(1, 64) as usize,
            },
            8 => Edit::Truncate {
                len: (rng.next_u64() as usize) % len.max(1),
            },
            _ => {
                // Flip one bit of the seed's byte.
                let bit = 1u8 << rng.range(0, 7);
                Edit::Put {
                    at,
                    hex: hex(&[base.get(at).copied().unwrap_or(0) ^ bit]),
                }
            }
        };
        edits.push(e);
    }
    edits
}

pub(crate) const NUMBERS: [&str; 14] = [
    "0",
    "1",
    "-1",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "99999999999999999999999",
    "",
    "1e9",
    "0x10",
    " 7 ",
    "65536",
];

/// A mutant of a `key=value,...` spec text.
pub(crate) fn mutate_spec(rng: &mut Rng, text: &str) -> String {
    let mut items: Vec<String> = text.split(',').map(str::to_owned).collect();
    for _ in 0..rng.range(1, 3) {
        let i = rng.range(0, items.len() as u32 - 1) as usize;
        match rng.range(0, 9) {
            0 | 1 => {
                // A number (or any field) inside the item.
                let mut segs: Vec<String> = Vec::new();
                let mut cur = String::new();
                for c in items[i].chars() {
                    if c == '=' || c == 'x' {
                        segs.push(std::mem::take(&mut cur));
                        segs.push(c.to_string());
                    } else {
                        cur.push(c);
                    }
                }
                segs.push(cur);
                let pick = 2 * rng.range(0, (segs.len() as u32 - 1) / 2) as usize;
                segs[pick] = NUMBERS[rng.range(0, NUMBERS.len() as u32 - 1) as usize].into();
                items[i] = segs.concat();
            }
            2 => items.push(items[i].clone()),
            3 => {
                if items.len() > 1 {
                    items.remove(i);
                }
            }
            4 => {
                let keys = [
                    "op",
                    "dtype",
                    "input",
                    "filter",
                    "stride",
                    "dilation",
                    "padding",
                    "depth_multiplier",
                    "activation",
                    "output",
                    "pad",
                ];
                let value = items[i].split_once('=').map_or("", |(_, v)| v).to_owned();
                let key = keys[rng.range(0, keys.len() as u32 - 1) as usize];
                items[i] = format!("{key}={value}");
            }
            5 => items[i] = items[i].replace('x', ["xx", "X", "x0x", ""][rng.range(0, 3) as usize]),
            6 => {
                let junk = ["é", "\u{0}", "ｘ", "=", ",", "  ", "\n", "op=relu", "🦀"];
                let at = rng.range(0, items[i].len() as u32) as usize;
                let at = (0..=at)
                    .rev()
                    .find(|&a| items[i].is_char_boundary(a))
                    .unwrap_or(0);
                items[i].insert_str(at, junk[rng.range(0, junk.len() as u32 - 1) as usize]);
            }
            7 => {
                let dims = rng.range(0, 6);
                let shape: Vec<String> = (0..dims)
                    .map(|_| NUMBERS[rng.range(0, 8) as usize].to_owned())
                    .collect();
                let key = ["input", "filter", "output"][rng.range(0, 2) as usize];
                items.push(format!("{key}={}", shape.join("x")));
            }
            8 => {
                let cut = rng.range(0, items[i].len() as u32) as usize;
                let cut = (0..=cut)
                    .rev()
                    .find(|&a| items[i].is_char_boundary(a))
                    .unwrap_or(0);
                items[i].truncate(cut);
            }
            _ => {
                let j = rng.range(0, items.len() as u32 - 1) as usize;
                items.swap(i, j)
            }
        }
    }
    items.join(",")
}

/// A mutant of a JSON document: a value replaced, a key dropped, or the
/// text cut or garbled.
pub(crate) fn mutate_json(rng: &mut Rng, text: &str) -> String {
    if rng.chance(25) {
        let mut b = text.as_bytes().to_vec();
        match rng.range(0, 2) {
            0 => b.truncate((rng.next_u64() as usize) % b.len().max(1)),
            1 => {
                let at = (rng.next_u64() as usize) % b.len().max(1);
                b[at] = b"{}[]\",:-09ex \\"[rng.range(0, 13) as usize];
            }
            _ => {
                let at = (rng.next_u64() as usize) % b.len().max(1);
                b.splice(
                    at..at,
                    "[[[[[[[[[[".repeat(rng.range(1, 30) as usize).into_bytes(),
                );
            }
        }
        return String::from_utf8_lossy(&b).into_owned();
    }
    let mut v: Value = serde_json::from_str(text).unwrap();
    for _ in 0..rng.range(1, 3) {
        // Collect paths to every node, pick one.
        let mut paths: Vec<Vec<PathStep>> = Vec::new();
        collect_paths(&v, &mut Vec::new(), &mut paths);
        let p = &paths[rng.range(0, paths.len() as u32 - 1) as usize];
        let replacement = match rng.range(0, 11) {
            0 => serde_json::json!(u64::MAX),
            1 => serde_json::json!(-1),
            2 => serde_json::json!(1e308),
            3 => serde_json::json!(0),
            4 => serde_json::json!(9_007_199_254_740_993u64),
            5 => serde_json::json!(""),
            6 => Value::String("x".repeat(10_000)),
            7 => Value::Null,
            8 => serde_json::json!([]),
            9 => serde_json::json!({}),
            10 => serde_json::json!(2147483648u64),
            _ => Value::String("op=conv2d,input=1x4294967295x2x1,filter=1x1x1x1".into()),
        };
        if rng.chance(15) {
            remove_at(&mut v, p);
        } else if let Some(slot) = node_at(&mut v, p) {
            *slot = replacement;
        }
    }
    if rng.chance(10) {
        if let Some(rows) = v.get_mut("rows").and_then(Value::as_array_mut) {
            let copy = rows.clone();
            rows.extend(copy);
        }
    }
    serde_json::to_string(&v).unwrap()
}

#[derive(Clone, Debug)]
pub(crate) enum PathStep {
    Key(String),
    Index(usize),
}

pub(crate) fn collect_paths(v: &Value, at: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                at.push(PathStep::Key(k.clone()));
                collect_paths(x, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                at.push(PathStep::Index(i));
                collect_paths(x, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

pub(crate) fn node_at<'a>(v: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match s {
            PathStep::Key(k) => cur.get_mut(k)?,
            PathStep::Index(i) => cur.get_mut(*i)?,
        };
    }
    Some(cur)
}

pub(crate) fn remove_at(v: &mut Value, path: &[PathStep]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    if let Some(p) = node_at(v, parent) {
        match (p, last) {
            (Value::Object(m), PathStep::Key(k)) => {
                m.remove(k);
            }
            (Value::Array(a), PathStep::Index(i)) if *i < a.len() => {
                a.remove(*i);
            }
            _ => {}
        }
    }
}
