//! Routing: which destinations a message published to an exchange reaches.
