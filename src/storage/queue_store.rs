//! (being written)
/// placeholder
pub struct QueueStore;
