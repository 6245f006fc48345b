//! Unity's verdict, read from a test program's output: its summary line
//! `N Tests M Failures K Ignored` and the `OK` or `FAIL` after it.

/// What Unity said about a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UnityResult {
    /// Tests run.
    pub tests: u64,
    /// Tests failed.
    pub failures: u64,
    /// Tests ignored.
    pub ignored: u64,
    /// Whether Unity said `OK` (else `FAIL`).
    pub ok: bool,
}

/// The last Unity summary in `output`, if there is one.
pub fn parse(output: &str) -> Option<UnityResult> {
    let lines: Vec<&str> = output.lines().map(str::trim).collect();
    lines.iter().enumerate().rev().find_map(|(i, line)| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [tests, "Tests", failures, "Failures", ignored, "Ignored"] = words[..] else {
            return None;
        };
        let verdict = lines[i + 1..].iter().find(|l| !l.is_empty())?;
        let ok = match *verdict {
            "OK" => true,
            "FAIL" => false,
            _ => return None,
        };
        Some(UnityResult {
            tests: tests.parse().ok()?,
            failures: failures.parse().ok()?,
            ignored: ignored.parse().ok()?,
            ok,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_and_verdict_are_read() {
        let out =
            "a.c:10:test_x:PASS\n\n-----------------------\n3 Tests 1 Failures 0 Ignored \nFAIL\n";
        assert_eq!(
            parse(out),
            Some(UnityResult {
                tests: 3,
                failures: 1,
                ignored: 0,
                ok: false
            })
        );
        assert_eq!(parse("hello\n"), None);
        assert_eq!(parse("2 Tests 0 Failures 0 Ignored\n"), None);
    }
}
