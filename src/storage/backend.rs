//! (being written)
/// placeholder
pub trait Backend {}
/// placeholder
pub trait StorageFile {}
/// placeholder
pub struct OsBackend;
