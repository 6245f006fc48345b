//! Text that reaches a terminal. Reports print strings a model, a guest or
//! another program chose (tensor and operator names, metadata, a Python's
//! last line of error); a control character among them would be obeyed by
//! the terminal (colours, a cursor moved, a line overwritten with `\r`),
//! hiding or forging what the report says. JSON needs nothing of this:
//! serde already escapes every control character.

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

/// A character a terminal would act on rather than show.
fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}
