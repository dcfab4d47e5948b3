//! Sizes in bytes as people write them in RabbitMQ's configuration and on a command line:
//! digits, optionally followed by a unit (`65536`, `64KiB`, `256MiB`, `1GiB`, `2GB`).
//! Used by `relaymq-server`'s size settings, the resource-alarm watermarks and
//! `relaymq-cli set`.
//!
//! The units are RabbitMQ's (`rabbit_resource_monitor_misc:parse_information_unit`, 3.13
//! and later, which follows Kubernetes): `Ki`/`KiB`, `Mi`/`MiB`, `Gi`/`GiB`, `Ti`/`TiB`
//! are powers of 1024; `k`/`kB`, `M`/`MB`, `G`/`GB`, `T`/`TB` are powers of 1000. Letter
//! case does not matter (`mib`, `MIB`, `mB` are accepted as RabbitMQ accepts them).

use std::fmt;

/// Binary units a size may end with (any letter case), with their multipliers.
const BINARY_UNITS: [(&str, u64); 8] = [
    ("ki", 1 << 10),
    ("kib", 1 << 10),
    ("mi", 1 << 20),
    ("mib", 1 << 20),
    ("gi", 1 << 30),
    ("gib", 1 << 30),
    ("ti", 1 << 40),
    ("tib", 1 << 40),
];

/// Decimal units a size may end with (any letter case), with their multipliers.
const DECIMAL_UNITS: [(&str, u64); 8] = [
    ("k", 1_000),
    ("kb", 1_000),
    ("m", 1_000_000),
    ("mb", 1_000_000),
    ("g", 1_000_000_000),
    ("gb", 1_000_000_000),
    ("t", 1_000_000_000_000),
    ("tb", 1_000_000_000_000),
];

/// The units [`format_size`] may write, binary ones first (preferred on a tie).
const FORMAT_UNITS: [(&str, u64); 8] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("TB", 1_000_000_000_000),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("kB", 1_000),
];

/// A size that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeError {
    /// What was wrong, naming the text.
    pub message: String,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SizeError {}

/// Whether `text` ends in letters (a unit, known or not) after its leading digits.
pub fn has_unit(text: &str) -> bool {
    text.trim_start_matches(|c: char| c.is_ascii_digit())
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
}

/// Parses a size in bytes: ASCII digits, optionally followed by one of RabbitMQ's units
/// (module doc). No sign, fraction or space.
///
/// # Errors
/// [`SizeError`] for an empty number, anything but digits before the unit, an unknown
/// unit, or a value over `u64::MAX` bytes.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let bad = || SizeError {
        message: format!("'{text}' is not a size like 268435456, 64KiB, 256MiB, 1GiB or 2GB"),
    };
    if digits.is_empty() {
        return Err(bad());
    }
    let multiplier = if unit.is_empty() {
        1
    } else {
        let unit = unit.to_ascii_lowercase();
        BINARY_UNITS
            .iter()
            .chain(DECIMAL_UNITS.iter())
            .find(|(name, _)| *name == unit)
            .map(|&(_, m)| m)
            .ok_or_else(bad)?
    };
    let too_large = || SizeError {
        message: format!("'{text}' is too large"),
    };
    let n: u64 = digits.parse().map_err(|_| too_large())?;
    n.checked_mul(multiplier).ok_or_else(too_large)
}

/// A byte count in its shortest exact form: with the unit that divides it into the
/// fewest digits, binary before decimal on a tie (`512MiB`, `2GB`, `100kB`, `255`), so
/// that it parses back with [`parse_size`] to the same value and reads as it was written.
pub fn format_size(bytes: u64) -> String {
    let mut best = bytes.to_string();
    if bytes == 0 {
        return best;
    }
    for &(suffix, unit) in FORMAT_UNITS.iter() {
        if bytes.is_multiple_of(unit) {
            let candidate = format!("{}{suffix}", bytes / unit);
            // A unit beats plain digits of the same length; among units the first wins.
            let plain = !best.ends_with('B');
            if candidate.len() < best.len() || (plain && candidate.len() == best.len()) {
                best = candidate;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_rabbitmq_units() {
        assert_eq!(parse_size("0").unwrap(), 0);
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("1TiB").unwrap(), 1 << 40);
        assert_eq!(parse_size("16Mi").unwrap(), 16 << 20);
        assert_eq!(parse_size("16mib").unwrap(), 16 << 20);
        assert_eq!(parse_size("16MIB").unwrap(), 16 << 20);
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_size("2gb").unwrap(), 2_000_000_000);
        assert_eq!(parse_size("12mb").unwrap(), 12_000_000);
        assert_eq!(parse_size("50M").unwrap(), 50_000_000);
        assert_eq!(parse_size("3k").unwrap(), 3_000);
        assert_eq!(parse_size("3kB").unwrap(), 3_000);
        for bad in [
            "",
            "MiB",
            "-1",
            "1.5GiB",
            "12 MiB",
            " 12",
            "12B",
            "12b",
            "12PiB",
            "12XB",
            "0x10",
            "99999999999999999999",
            "99999999999GiB",
            "99999999TiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert!(parse_size("12QB").unwrap_err().message.contains("2GB"));
    }

    #[test]
    fn units_are_recognised_as_such() {
        assert!(has_unit("16MiB"));
        assert!(has_unit("2GB"));
        assert!(has_unit("2x"));
        assert!(!has_unit("16"));
        assert!(!has_unit("0.4"));
        assert!(!has_unit(""));
    }

    #[test]
    fn formatted_sizes_parse_back() {
        for v in [
            0,
            1,
            1000,
            1024,
            3 << 20,
            5 << 30,
            (1 << 30) + 1,
            7 << 40,
            u64::MAX,
        ] {
            assert_eq!(parse_size(&format_size(v)).unwrap(), v, "{v}");
        }
        assert_eq!(format_size(512 << 20), "512MiB");
        assert_eq!(format_size(1 << 30), "1GiB");
        assert_eq!(format_size(2 << 40), "2TiB");
        assert_eq!(format_size(128 << 10), "128KiB");
        assert_eq!(format_size(1024), "1KiB");
        // As written: decimal sizes stay decimal.
        assert_eq!(format_size(2_000_000_000), "2GB");
        assert_eq!(format_size(512_000_000), "512MB");
        assert_eq!(format_size(100_000), "100kB");
        assert_eq!(format_size(1_000_000_001), "1000000001");
        assert_eq!(format_size(255), "255");
        assert_eq!(format_size(0), "0");
    }
}
