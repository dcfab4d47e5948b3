//! A blocking client library over the native protocol.
