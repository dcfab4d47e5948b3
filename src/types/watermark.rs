//! The memory high-water mark as a value: the two forms RabbitMQ writes it in, a fraction
//! of the memory available (`vm_memory_high_watermark.relative = 0.6`) or an absolute size
//! (`vm_memory_high_watermark.absolute = 2GiB`), RabbitMQ's memory.html.
//!
//! Only the value lives here, so the wire codecs (`native`'s `memory-high-watermark.set`)
//! can carry it without depending on the alarms. Its default, parsing, range check and
//! limit in bytes are the alarms' rules: [`crate::alarm::watermark`].

/// Where the memory alarm goes off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MemoryWatermark {
    /// A fraction of the memory available, `0.0..=1.0` (0 sets the alarm at once and so
    /// blocks every publisher, as in RabbitMQ).
    Relative(f64),
    /// An absolute number of bytes of resident memory, at least
    /// [`MEMORY_HIGH_WATERMARK_ABSOLUTE_MIN_BYTES`](crate::alarm::watermark::MEMORY_HIGH_WATERMARK_ABSOLUTE_MIN_BYTES);
    /// above the memory available it is the memory available (RabbitMQ's
    /// `interpret_limit`).
    Absolute(u64),
}
