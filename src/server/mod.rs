//! The server: mio event loop, connections, worker pool, shutdown.
