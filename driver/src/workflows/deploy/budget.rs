//! `--fits`: a size as the user writes it ([`parse_size`]) and the arena to
//! allocate against that budget ([`Budget`]).

use serde::Serialize;

/// A size in bytes as `--fits` takes it: `131072`, `128K`, `0.5M` (K and M
/// are 1024 and 1024², case-insensitive, an optional trailing `B`).
pub fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix(['B', 'b'])
        .filter(|s| !s.is_empty())
        .unwrap_or(t);
    let (number, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c.to_ascii_uppercase()),
        _ => (t, ' '),
    };
    let scale: u64 = match unit {
        ' ' => 1,
        'K' => 1 << 10,
        'M' => 1 << 20,
        _ => {
            return Err(format!(
                "`{text}`: the unit must be K or M (or none: bytes)"
            ))
        }
    };
    let bad = || format!("`{text}` is not a size such as 131072, 128K or 0.5M");
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    // The fraction in exact integers: "0.5M" is 524288 B, "1.3K" is no
    // whole number of bytes.
    let digits = fraction.len() as u32;
    if digits > 12 {
        return Err(bad());
    }
    let denominator = 10u64.pow(digits);
    let numerator: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().map_err(|_| bad())?
    };
    let fraction_bytes = (numerator as u128) * scale as u128;
    if !fraction_bytes.is_multiple_of(denominator as u128) {
        return Err(format!("`{text}` is not a whole number of bytes"));
    }
    (whole as u128 * scale as u128 + fraction_bytes / denominator as u128)
        .try_into()
        .ok()
        .filter(|&b: &u64| b > 0)
        .ok_or_else(bad)
}

/// `--fits`: the arena to allocate against the firmware's budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Budget {
    /// The budget in bytes.
    pub budget_bytes: u64,
    /// The arena to allocate.
    pub arena_bytes: u64,
}

impl Budget {
    /// The arena fits the budget.
    pub fn fits(&self) -> bool {
        self.arena_bytes <= self.budget_bytes
    }

    /// What is left (fits) or missing (does not), in words.
    pub fn message(&self) -> String {
        if self.fits() {
            format!(
                "fits: the arena to allocate ({} B) leaves {} B of the {} B budget",
                self.arena_bytes,
                self.budget_bytes - self.arena_bytes,
                self.budget_bytes
            )
        } else {
            format!(
                "DOES NOT FIT: the arena to allocate ({} B) exceeds the {} B budget by {} B",
                self.arena_bytes,
                self.budget_bytes,
                self.arena_bytes - self.budget_bytes
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_bytes_kib_and_mib() {
        assert_eq!(parse_size("131072"), Ok(131072));
        assert_eq!(parse_size("128K"), Ok(131072));
        assert_eq!(parse_size("128k"), Ok(131072));
        assert_eq!(parse_size("128KB"), Ok(131072));
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size("0.5M"), Ok(524288));
        assert_eq!(parse_size(".5M"), Ok(524288));
        assert_eq!(parse_size("1.25K"), Ok(1280));
        assert!(parse_size("1.3K").is_err());
        assert!(parse_size("12G").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("K").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("1.2.3").is_err());
        assert!(parse_size("99999999999999999999M").is_err());
    }

    #[test]
    fn the_budget_says_what_is_left_or_missing() {
        let fits = Budget {
            budget_bytes: 131072,
            arena_bytes: 82316,
        };
        assert!(fits.fits());
        assert!(fits.message().contains("leaves 48756 B"));
        let short = Budget {
            budget_bytes: 65536,
            arena_bytes: 82316,
        };
        assert!(!short.fits());
        assert!(short.message().contains("by 16780 B"));
    }
}
