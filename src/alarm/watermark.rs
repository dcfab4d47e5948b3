//! The memory high-water mark as RabbitMQ writes it: a fraction of the memory available
//! (`vm_memory_high_watermark.relative = 0.6`) or an absolute size
//! (`vm_memory_high_watermark.absolute = 2GiB`), RabbitMQ's memory.html.
//!
//! The value type, [`MemoryWatermark`], is [`crate::types::watermark`]'s (the native
//! protocol carries it); its default, parsing, range check and limit are here.

pub use crate::types::MemoryWatermark;

use crate::types::size::{format_size, has_unit, parse_size};
use std::fmt;

/// Default memory high-water mark: 60% of the memory available (RAM, or the cgroup limit
/// when lower). RabbitMQ 4.0 raised its default `vm_memory_high_watermark.relative` from
/// 0.4 to 0.6 (`deps/rabbit/Makefile`); RelayMQ follows 4.x.
pub const MEMORY_HIGH_WATERMARK_RELATIVE_DEFAULT: f64 = 0.6;

/// Largest relative watermark accepted, as a fraction of the memory available: the whole
/// of it (a higher mark could never fire before the OOM killer does; RabbitMQ's
/// `MAX_VM_MEMORY_HIGH_WATERMARK`).
pub const MEMORY_HIGH_WATERMARK_RELATIVE_MAX: f64 = 1.0;

/// Smallest absolute watermark accepted, in bytes (64 MiB). An empty server's resident
/// memory is about 30 MiB, so a mark below this would block every publisher from the
/// start; that is nearly always a unit forgotten (`2` meant as 2 GiB). A relative 0 still
/// blocks publishers on purpose, as in RabbitMQ.
pub const MEMORY_HIGH_WATERMARK_ABSOLUTE_MIN_BYTES: u64 = 64 << 20;

/// What every watermark error ends with: the two forms, with an example of each.
const BOTH_FORMS: &str =
    "write a fraction of the memory available like 0.4, or an absolute size like 1GiB";

impl Default for MemoryWatermark {
    fn default() -> MemoryWatermark {
        MemoryWatermark::Relative(MEMORY_HIGH_WATERMARK_RELATIVE_DEFAULT)
    }
}

/// A watermark that does not parse or is out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatermarkError {
    /// What was wrong, naming the value and showing both forms (`0.4`, `1GiB`).
    pub message: String,
}

impl fmt::Display for WatermarkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for WatermarkError {}

impl MemoryWatermark {
    /// Parses `--memory-high-watermark`, the `memory-high-watermark` file key and
    /// `relaymq-cli set memory-high-watermark`: a bare number up to 1.0 is a fraction of
    /// the memory available (`0.4`, `1`, `0`); a bare whole number above 1 is bytes
    /// (`1073741824`); a number with a unit is a size (`512MiB`, `2GB`, RabbitMQ's units,
    /// [`crate::types::size`]). An absolute value is at least
    /// [`MEMORY_HIGH_WATERMARK_ABSOLUTE_MIN_BYTES`].
    ///
    /// # Errors
    /// [`WatermarkError`], showing both forms, for text that is neither form, a fraction
    /// above 1.0, or an absolute value below the minimum (`2` is 2 bytes).
    pub fn parse(text: &str) -> Result<MemoryWatermark, WatermarkError> {
        let neither = || WatermarkError {
            message: format!("'{text}' is not a memory high watermark: {BOTH_FORMS}"),
        };
        let watermark = if has_unit(text) {
            MemoryWatermark::Absolute(parse_size(text).map_err(|e| WatermarkError {
                message: format!("{e}: {BOTH_FORMS}"),
            })?)
        } else if text.contains('.') {
            let plain = text.bytes().all(|b| b.is_ascii_digit() || b == b'.');
            let f: f64 = text
                .parse()
                .ok()
                .filter(|_| plain && !text.starts_with('.'))
                .ok_or_else(neither)?;
            MemoryWatermark::Relative(f)
        } else {
            let n: u64 = text
                .parse()
                .ok()
                .filter(|_| !text.starts_with('+'))
                .ok_or_else(neither)?;
            if n <= 1 {
                MemoryWatermark::Relative(n as f64)
            } else {
                MemoryWatermark::Absolute(n)
            }
        };
        watermark.validate()?;
        Ok(watermark)
    }

    /// Checks the range: a fraction from 0 to [`MEMORY_HIGH_WATERMARK_RELATIVE_MAX`], an
    /// absolute value of at least [`MEMORY_HIGH_WATERMARK_ABSOLUTE_MIN_BYTES`]. The server
    /// checks what `relaymq-cli set` sends with the same rule.
    ///
    /// # Errors
    /// [`WatermarkError`] naming the value and showing both forms.
    pub fn validate(&self) -> Result<(), WatermarkError> {
        match *self {
            MemoryWatermark::Relative(f)
                if !(f.is_finite() && (0.0..=MEMORY_HIGH_WATERMARK_RELATIVE_MAX).contains(&f)) =>
            {
                Err(WatermarkError {
                    message: format!(
                        "a relative memory high watermark is a fraction from 0 to \
                         {MEMORY_HIGH_WATERMARK_RELATIVE_MAX:.1}, not {f}: {BOTH_FORMS}"
                    ),
                })
            }
            MemoryWatermark::Absolute(b) if b < MEMORY_HIGH_WATERMARK_ABSOLUTE_MIN_BYTES => {
                Err(WatermarkError {
                    message: format!(
                        "an absolute memory high watermark of {b} bytes is below the \
                         smallest a broker can run with ({}): {BOTH_FORMS}",
                        format_size(MEMORY_HIGH_WATERMARK_ABSOLUTE_MIN_BYTES)
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    /// The limit in bytes of resident memory, given the memory available in bytes (an
    /// absolute mark above the memory available is the memory available, as RabbitMQ's
    /// `vm_memory_monitor:interpret_limit`).
    pub fn limit_bytes(&self, available_bytes: u64) -> u64 {
        match *self {
            // The product is at most `available_bytes`; the cast saturates.
            MemoryWatermark::Relative(f) => (available_bytes as f64 * f) as u64,
            MemoryWatermark::Absolute(b) => b.min(available_bytes),
        }
    }
}

impl fmt::Display for MemoryWatermark {
    /// The form [`MemoryWatermark::parse`] reads back: `0.4` or `512MiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MemoryWatermark::Relative(r) if r.fract() == 0.0 => write!(f, "{r:.1}"),
            MemoryWatermark::Relative(r) => write!(f, "{r}"),
            MemoryWatermark::Absolute(b) => f.write_str(&format_size(b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_numbers_up_to_one_are_relative_the_rest_absolute() {
        let parse = |t: &str| MemoryWatermark::parse(t).unwrap();
        assert_eq!(parse("0.4"), MemoryWatermark::Relative(0.4));
        assert_eq!(parse("0"), MemoryWatermark::Relative(0.0));
        assert_eq!(parse("1"), MemoryWatermark::Relative(1.0));
        assert_eq!(parse("1.0"), MemoryWatermark::Relative(1.0));
        assert_eq!(parse("512MiB"), MemoryWatermark::Absolute(512 << 20));
        assert_eq!(parse("2GB"), MemoryWatermark::Absolute(2_000_000_000));
        assert_eq!(parse("1Gi"), MemoryWatermark::Absolute(1 << 30));
        assert_eq!(parse("1073741824"), MemoryWatermark::Absolute(1 << 30));
        assert_eq!(parse("64MiB"), MemoryWatermark::Absolute(64 << 20));
        assert_eq!(
            MemoryWatermark::default(),
            MemoryWatermark::Relative(0.6),
            "RabbitMQ 4.x's default"
        );
    }

    #[test]
    fn a_number_that_cannot_run_a_broker_is_refused_showing_both_forms() {
        for small in ["2", "1000", "63MiB", "1B", "67108863"] {
            let e = MemoryWatermark::parse(small).unwrap_err().message;
            assert!(e.contains("0.4") && e.contains("1GiB"), "{small}: {e}");
        }
        let e = MemoryWatermark::parse("2").unwrap_err().message;
        assert!(e.contains("2 bytes") && e.contains("64MiB"), "{e}");
        assert!(MemoryWatermark::Absolute(2).validate().is_err());
        assert!(MemoryWatermark::Absolute(64 << 20).validate().is_ok());
    }

    #[test]
    fn bad_watermarks_are_refused() {
        for bad in [
            "", "1.5", "2.0", "-0.1", "0.4.1", "nan", "inf", "0.5GiB", "abc", "B", "1.0B", ".5",
            "+2", "1e9", " 0.4", "12 MiB",
        ] {
            let e = MemoryWatermark::parse(bad).expect_err(bad).message;
            assert!(e.contains("0.4") && e.contains("1GiB"), "{bad}: {e}");
        }
        assert!(MemoryWatermark::Relative(f64::NAN).validate().is_err());
        assert!(MemoryWatermark::Relative(-1.0).validate().is_err());
    }

    #[test]
    fn limits_and_display_round_trip() {
        assert_eq!(MemoryWatermark::Relative(0.4).limit_bytes(1000), 400);
        assert_eq!(
            MemoryWatermark::Relative(1.0).limit_bytes(u64::MAX),
            u64::MAX
        );
        assert_eq!(
            MemoryWatermark::Absolute(7 << 30).limit_bytes(1 << 30),
            1 << 30
        );
        assert_eq!(
            MemoryWatermark::Absolute(1 << 30).limit_bytes(8 << 30),
            1 << 30
        );
        for w in [
            MemoryWatermark::Relative(0.4),
            MemoryWatermark::Relative(0.0),
            MemoryWatermark::Relative(1.0),
            MemoryWatermark::Absolute(512 << 20),
            MemoryWatermark::Absolute(2_000_000_000),
            MemoryWatermark::Absolute((64 << 20) + 1),
        ] {
            let text = w.to_string();
            assert_eq!(MemoryWatermark::parse(&text).unwrap(), w, "{text}");
        }
    }
}
