//! Suppressions (`--suppressions FILE`): findings a user has judged and
//! does not want to see again, matched by kind and by the functions in their
//! call chain.
//!
//! One rule a line: a kind (`overrun`, `use-after-free`, `uninitialised`,
//! `double-free`, `invalid-free`, `invalid-access`, `fishy-argument`,
//! `read-only-write`, `leak`, or `*` for any)
//! and a function-name pattern (`*` any run of characters, `?` one). A
//! finding is suppressed when a rule's kind is its own and the pattern
//! matches a function of its chain (a leak: of its allocation chain).
//! `#` starts a comment; blank lines are skipped.
//!
//! ```text
//! # scratch the kernel reads before writing, checked by hand
//! uninitialised arm_nn_mat_mult_kernel_s8_s16
//! leak          my_pool_*
//! ```

use std::path::Path;

use crate::{Error, Result};

/// Kinds a rule may name.
pub(crate) const KINDS: [&str; 10] = [
    "overrun",
    "use-after-free",
    "uninitialised",
    "double-free",
    "invalid-free",
    "invalid-access",
    "fishy-argument",
    "read-only-write",
    "leak",
    "*",
];

/// Most bytes a suppressions file may have.
const MAX_FILE: u64 = 1 << 20;

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The kind it applies to (`*`: all).
    pub kind: String,
    /// The function-name pattern.
    pub pattern: String,
    /// Line of the file, for messages.
    pub line: usize,
}

/// A parsed suppressions file.
#[derive(Clone, Debug, Default)]
pub struct Suppressions {
    /// Its rules, in file order.
    pub rules: Vec<Rule>,
}

impl Suppressions {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Suppressions> {
        let text = memtrace_io::input::read_text_limited(path, MAX_FILE, "suppressions files")?;
        Self::parse(&text).map_err(|e| Error::Failed(format!("{}: {e}", path.display())))
    }

    /// Parses the text of a suppressions file.
    pub fn parse(text: &str) -> std::result::Result<Suppressions, String> {
        let mut rules = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            let content = line.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let mut words = content.split_whitespace();
            let (Some(kind), Some(pattern), None) = (words.next(), words.next(), words.next())
            else {
                return Err(format!(
                    "line {line_no}: expected `KIND FUNCTION-PATTERN`, found `{content}`"
                ));
            };
            if !KINDS.contains(&kind) {
                return Err(format!(
                    "line {line_no}: unknown kind `{kind}` (one of {})",
                    KINDS.join(", ")
                ));
            }
            rules.push(Rule {
                kind: kind.to_owned(),
                pattern: pattern.to_owned(),
                line: line_no,
            });
        }
        Ok(Suppressions { rules })
    }

    /// The rule that suppresses a finding of `kind` whose chain has the
    /// functions `functions`, if any.
    pub(crate) fn matching(&self, kind: &str, functions: &[&str]) -> Option<&Rule> {
        self.rules.iter().find(|r| {
            (r.kind == "*" || r.kind == kind) && functions.iter().any(|f| glob(&r.pattern, f))
        })
    }
}

/// Whether `text` matches `pattern` (`*` any run, `?` one character).
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_names() {
        assert!(glob("arm_*_s8", "arm_convolve_s8"));
        assert!(!glob("arm_*_s8", "arm_convolve_s16"));
        assert!(glob("*", ""));
        assert!(glob("f?o", "foo"));
        assert!(!glob("foo", "foobar"));
    }

    #[test]
    fn rules_apply_to_their_kind_and_bad_lines_are_refused() {
        let s = Suppressions::parse("# c\n\nuninitialised arm_nn_*  # why\n* helper\n").unwrap();
        assert_eq!(s.rules.len(), 2);
        let chain = ["memcpy", "arm_nn_mat_mult", "main"];
        assert_eq!(s.matching("uninitialised", &chain).map(|r| r.line), Some(3));
        assert!(s.matching("overrun", &chain).is_none());
        assert!(s.matching("leak", &["helper"]).is_some());
        assert!(Suppressions::parse("overrun\n")
            .unwrap_err()
            .contains("line 1"));
        assert!(Suppressions::parse("bogus f\n")
            .unwrap_err()
            .contains("unknown kind"));
    }
}
