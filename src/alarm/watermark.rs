//! The memory high-water mark as RabbitMQ writes it: a fraction of the memory available
//! (`vm_memory_high_watermark.relative = 0.4`) or an absolute size
//! (`vm_memory_high_watermark.absolute = 512MiB`), RabbitMQ's memory.html.

use crate::types::size::{format_size, parse_size, SIZE_SUFFIXES};
use std::fmt;

/// Default memory high-water mark: 40% of the memory available (RAM, or the cgroup limit
/// when lower), RabbitMQ's default `vm_memory_high_watermark.relative`.
pub const MEMORY_HIGH_WATERMARK_RELATIVE_DEFAULT: f64 = 0.4;

/// Largest relative watermark accepted, as a fraction of the memory available: the whole
/// of it (a higher mark could never fire before the OOM killer does).
pub const MEMORY_HIGH_WATERMARK_RELATIVE_MAX: f64 = 1.0;

/// Where the memory alarm goes off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MemoryWatermark {
    /// A fraction of the memory available, `0.0..=1.0` (0 sets the alarm at once and so
    /// blocks every publisher, as in RabbitMQ).
    Relative(f64),
    /// An absolute number of bytes of resident memory.
    Absolute(u64),
}

impl Default for MemoryWatermark {
    fn default() -> MemoryWatermark {
        MemoryWatermark::Relative(MEMORY_HIGH_WATERMARK_RELATIVE_DEFAULT)
    }
}

/// A watermark that does not parse or is out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatermarkError {
    /// What was wrong, naming the value.
    pub message: String,
}

impl fmt::Display for WatermarkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for WatermarkError {}

impl MemoryWatermark {
    /// Parses `--memory-high-watermark` / `relaymq-cli set memory-high-watermark`: a
    /// number with a decimal point, or `0` or `1`, is a fraction of the memory available
    /// (`0.4`); a size with a unit, a whole number above 1, or a whole number followed by
    /// `B` is an absolute number of bytes (`512MiB`, `1073741824`, `1B`).
    ///
    /// # Errors
    /// [`WatermarkError`] for text that is neither, or a fraction outside `0.0..=1.0`.
    pub fn parse(text: &str) -> Result<MemoryWatermark, WatermarkError> {
        let has_unit = SIZE_SUFFIXES.iter().any(|(s, _)| text.ends_with(s));
        if let Some(digits) = text.strip_suffix('B').filter(|_| !has_unit) {
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                return parse_size(digits)
                    .map(MemoryWatermark::Absolute)
                    .map_err(|e| WatermarkError { message: e.message });
            }
        }
        if !has_unit && (text.contains('.') || text == "0" || text == "1") {
            let f: f64 = text.parse().map_err(|_| WatermarkError {
                message: format!("'{text}' is neither a fraction like 0.4 nor a size like 512MiB"),
            })?;
            let w = MemoryWatermark::Relative(f);
            w.validate()?;
            return Ok(w);
        }
        parse_size(text)
            .map(MemoryWatermark::Absolute)
            .map_err(|e| WatermarkError {
                message: format!(
                    "{e}; a memory high watermark is a fraction like 0.4 or a size like 512MiB"
                ),
            })
    }

    /// Checks the range of a relative watermark (any absolute one is valid).
    ///
    /// # Errors
    /// [`WatermarkError`] for a fraction that is not finite or outside `0.0..=1.0`.
    pub fn validate(&self) -> Result<(), WatermarkError> {
        match *self {
            MemoryWatermark::Relative(f)
                if !(f.is_finite() && (0.0..=MEMORY_HIGH_WATERMARK_RELATIVE_MAX).contains(&f)) =>
            {
                Err(WatermarkError {
                    message: format!(
                        "a relative memory high watermark must be between 0 and \
                         {MEMORY_HIGH_WATERMARK_RELATIVE_MAX}, not {f}"
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    /// The limit in bytes of resident memory, given the memory available in bytes.
    pub fn limit_bytes(&self, available_bytes: u64) -> u64 {
        match *self {
            // The product is at most `available_bytes`; the cast saturates.
            MemoryWatermark::Relative(f) => (available_bytes as f64 * f) as u64,
            MemoryWatermark::Absolute(b) => b,
        }
    }
}

impl fmt::Display for MemoryWatermark {
    /// The form [`MemoryWatermark::parse`] reads back: `0.4` or `512MiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MemoryWatermark::Relative(r) if r.fract() == 0.0 => write!(f, "{r:.1}"),
            MemoryWatermark::Relative(r) => write!(f, "{r}"),
            // `1` alone would read back as the fraction 1.0.
            MemoryWatermark::Absolute(b) if b <= 1 => write!(f, "{b}B"),
            MemoryWatermark::Absolute(b) => f.write_str(&format_size(b)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_are_relative_sizes_absolute() {
        assert_eq!(
            MemoryWatermark::parse("0.4").unwrap(),
            MemoryWatermark::Relative(0.4)
        );
        assert_eq!(
            MemoryWatermark::parse("0").unwrap(),
            MemoryWatermark::Relative(0.0)
        );
        assert_eq!(
            MemoryWatermark::parse("1").unwrap(),
            MemoryWatermark::Relative(1.0)
        );
        assert_eq!(
            MemoryWatermark::parse("512MiB").unwrap(),
            MemoryWatermark::Absolute(512 << 20)
        );
        assert_eq!(
            MemoryWatermark::parse("1073741824").unwrap(),
            MemoryWatermark::Absolute(1 << 30)
        );
        assert_eq!(
            MemoryWatermark::parse("2").unwrap(),
            MemoryWatermark::Absolute(2)
        );
        assert_eq!(
            MemoryWatermark::parse("1B").unwrap(),
            MemoryWatermark::Absolute(1)
        );
    }

    #[test]
    fn bad_watermarks_are_refused() {
        for bad in [
            "", "1.5", "-0.1", "0.4.1", "nan", "inf", "12mb", "0.5GiB", "abc", "B", "1.0B",
        ] {
            assert!(MemoryWatermark::parse(bad).is_err(), "{bad}");
        }
        assert!(MemoryWatermark::Relative(f64::NAN).validate().is_err());
        assert!(MemoryWatermark::Absolute(0).validate().is_ok());
    }

    #[test]
    fn limits_and_display_round_trip() {
        assert_eq!(MemoryWatermark::Relative(0.4).limit_bytes(1000), 400);
        assert_eq!(
            MemoryWatermark::Relative(1.0).limit_bytes(u64::MAX),
            u64::MAX
        );
        assert_eq!(MemoryWatermark::Absolute(7).limit_bytes(1000), 7);
        for w in [
            MemoryWatermark::Relative(0.4),
            MemoryWatermark::Relative(0.0),
            MemoryWatermark::Relative(1.0),
            MemoryWatermark::Absolute(512 << 20),
            MemoryWatermark::Absolute(1),
            MemoryWatermark::Absolute(0),
            MemoryWatermark::Absolute(12345),
        ] {
            let text = w.to_string();
            assert_eq!(MemoryWatermark::parse(&text).unwrap(), w, "{text}");
        }
    }
}
