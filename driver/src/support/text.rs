//! Text that reaches a terminal. Reports print strings a model, a guest or
//! another program chose (tensor and operator names, metadata, a Python's
//! last line of error); a control character among them would be obeyed by
//! the terminal (colours, a cursor moved, a line overwritten with `\r`),
//! hiding or forging what the report says.
//!
//! JSON is data, and must stay JSON: the text escape (`\x7f`) is no JSON
//! escape, so a JSON report gets [`json_terminal_safe`] instead, which
//! writes the same characters as JSON's own `\u007f` escapes (serde writes
//! C0 controls escaped, but DEL, C1 controls and bidi characters raw).

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control character except newline and tab written as a
/// visible escape (`\x1b`, `\r`, `\u{202e}`), so that it prints as what it
/// is. Unicode's bidirectional overrides and isolates count as control
/// characters here: they reorder what follows them on the line.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !needs_escape(c) {
            out.push(c);
        } else if c == '\r' {
            out.push_str("\\r");
        } else if c.is_ascii() {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

/// `json` (a JSON document) with every character a terminal would act on
/// inside its strings written as a JSON `\uXXXX` escape: the document
/// parses to the same value, and printing it moves no cursor and reorders
/// no line. Every such character is in the Basic Multilingual Plane, so one
/// escape each. Outside strings nothing is touched (JSON's whitespace
/// there is space, tab, newline and carriage return, none of them
/// rewritten).
pub fn json_terminal_safe(json: &str) -> Cow<'_, str> {
    // Valid JSON holds a raw tab or newline outside strings only.
    if !json.chars().any(needs_escape) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string && !escaped && needs_json_escape(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
            continue;
        }
        out.push(c);
        if escaped {
            escaped = false;
        } else if in_string && c == '\\' {
            escaped = true;
        } else if c == '"' {
            in_string = !in_string;
        }
    }
    Cow::Owned(out)
}

/// A character [`json_terminal_safe`] writes as a `\uXXXX` escape: any a
/// terminal acts on, tab and newline included (inside a JSON string they
/// are escapes already; raw they are invalid there).
fn needs_json_escape(c: char) -> bool {
    c.is_control() || needs_escape(c)
}

/// A writer of text reports printed as they are made (`bench`): each line
/// reaches the inner writer [`terminal_safe`], whole (an escape is never
/// split), its bytes read as UTF-8 (an invalid byte shows as U+FFFD).
pub struct TerminalSafe<W: std::io::Write> {
    inner: W,
    line: Vec<u8>,
}

impl<W: std::io::Write> TerminalSafe<W> {
    /// Lines written to `inner`, escaped.
    pub fn new(inner: W) -> Self {
        TerminalSafe {
            inner,
            line: Vec::new(),
        }
    }

    /// Writes what is held, escaped.
    fn write_held(&mut self) -> std::io::Result<()> {
        let text = String::from_utf8_lossy(&self.line);
        self.inner.write_all(terminal_safe(&text).as_bytes())?;
        self.line.clear();
        Ok(())
    }
}

impl<W: std::io::Write> std::io::Write for TerminalSafe<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for chunk in buf.split_inclusive(|&b| b == b'\n') {
            self.line.extend_from_slice(chunk);
            if chunk.ends_with(b"\n") {
                self.write_held()?;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.line.is_empty() {
            self.write_held()?;
        }
        self.inner.flush()
    }
}

impl<W: std::io::Write> Drop for TerminalSafe<W> {
    /// A last line without its newline is printed too (an error here has
    /// no one left to tell).
    fn drop(&mut self) {
        let _ = std::io::Write::flush(self);
    }
}

/// A character a terminal would act on rather than show.
fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every class a terminal acts on: C0, DEL, C1, bidi marks, overrides
    /// and isolates; and plain text around them.
    const HOSTILE: &str = "a\u{1b}[31m\r\u{7f}\u{85}\u{9b}\u{200e}\u{202e}\u{2066}\u{2069}μ\"\\z";

    #[test]
    fn json_escapes_keep_the_document_and_its_strings() {
        let doc =
            serde_json::to_string_pretty(&serde_json::json!({"name": HOSTILE, "n": [1]})).unwrap();
        let safe = json_terminal_safe(&doc);
        assert!(!safe.chars().any(needs_escape), "{safe}");
        assert!(
            safe.contains("\\u007f") && safe.contains("\\u202e"),
            "{safe}"
        );
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["name"], HOSTILE);
        assert_eq!(back["n"][0], 1);
    }

    #[test]
    fn a_line_writer_escapes_whole_lines() {
        use std::io::Write;
        let mut printed = Vec::new();
        let mut out = TerminalSafe::new(&mut printed);
        // `\u{202e}` split across two writes is still one character.
        let bidi = "\u{202e}".as_bytes();
        out.write_all(b"model a\x1b").unwrap();
        out.write_all(&bidi[..1]).unwrap();
        out.write_all(&bidi[1..]).unwrap();
        out.write_all(b"b\nnext\x7f").unwrap();
        drop(out);
        assert_eq!(
            String::from_utf8(printed).unwrap(),
            "model a\\x1b\\u{202e}b\nnext\\x7f"
        );
    }

    #[test]
    fn json_without_hostile_characters_is_not_copied() {
        let doc = "{\n  \"a\": \"μ\\\"\\\\\"\n}\n";
        assert!(matches!(json_terminal_safe(doc), Cow::Borrowed(d) if d == doc));
    }
}
