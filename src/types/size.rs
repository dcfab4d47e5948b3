//! Sizes in bytes as people write them on a command line: digits, optionally followed by
//! a binary unit (`65536`, `64KiB`, `256MiB`, `1GiB`). Used by `relaymq-server`'s size
//! flags, the resource-alarm watermarks and `relaymq-cli set`.

use std::fmt;

/// Units a size may end with, with their multipliers (binary units, as RabbitMQ's `KiB`,
/// `MiB`, `GiB`).
pub const SIZE_SUFFIXES: [(&str, u64); 3] = [("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)];

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

/// Parses a size in bytes: ASCII digits, optionally followed by `KiB`, `MiB` or `GiB`.
///
/// # Errors
/// [`SizeError`] for an empty number, anything but digits before the unit, an unknown
/// unit, or a value over `u64::MAX` bytes.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let (digits, unit) = SIZE_SUFFIXES
        .iter()
        .find_map(|&(suffix, unit)| text.strip_suffix(suffix).map(|d| (d, unit)))
        .unwrap_or((text, 1));
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SizeError {
            message: format!("'{text}' is not a size like 268435456, 64KiB, 256MiB or 1GiB"),
        });
    }
    let too_large = || SizeError {
        message: format!("'{text}' is too large"),
    };
    let n: u64 = digits.parse().map_err(|_| too_large())?;
    n.checked_mul(unit).ok_or_else(too_large)
}

/// A byte count written with the largest binary unit that divides it (`512MiB`, `1000`),
/// so that it parses back with [`parse_size`] to the same value.
pub fn format_size(bytes: u64) -> String {
    for &(suffix, unit) in SIZE_SUFFIXES.iter().rev() {
        if bytes != 0 && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("0").unwrap(), 0);
        assert_eq!(parse_size("65536").unwrap(), 65536);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        for bad in [
            "",
            "MiB",
            "-1",
            "1.5GiB",
            "12 MiB",
            "12mb",
            "1TiB",
            "99999999999999999999",
            "99999999999GiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formatted_sizes_parse_back() {
        for v in [0, 1, 1000, 1024, 3 << 20, 5 << 30, (1 << 30) + 1, u64::MAX] {
            assert_eq!(parse_size(&format_size(v)).unwrap(), v, "{v}");
        }
        assert_eq!(format_size(512 << 20), "512MiB");
        assert_eq!(format_size(1 << 30), "1GiB");
    }
}
