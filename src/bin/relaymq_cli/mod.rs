//! The parts of `relaymq-cli`: argument parsing, the commands, output formats, and the
//! error type that decides the exit code.

pub mod args;
pub mod commands;
pub mod migrate;
pub mod output;

use relaymq::client::ClientError;
use relaymq::error::ReplyCode;

/// Why the tool failed; decides the message and the exit code.
#[derive(Debug)]
pub enum CliError {
    /// Bad command line (exit 2).
    Usage(String),
    /// A file named on the command line cannot be read (exit 2, like a usage error, but
    /// without the usage hint).
    Input(String),
    /// Could not connect or authenticate (exit 3).
    Connect(ClientError),
    /// Could not reach or log in to another broker (`migrate`'s source; exit 3).
    Unreachable(String),
    /// A request failed (exit 1 when the server refused or the connection was lost
    /// midway, 4 on timeout, 2 for client-side validation).
    Client(ClientError),
    /// A run-time limit set by the user passed (exit 4).
    Timeout(String),
    /// A published message was nacked or returned (exit 5).
    Rejected(String),
    /// Anything else: reading standard input, writing standard output (exit 1).
    Other(anyhow::Error),
}

impl CliError {
    /// The process exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) | CliError::Input(_) => 2,
            CliError::Connect(_) | CliError::Unreachable(_) => 3,
            CliError::Client(e) => match e {
                ClientError::Timeout => 4,
                ClientError::Auth { .. } => 3,
                ClientError::Usage(_) => 2,
                // A refusal, or a connection lost after it was made (the outcome of what
                // was in flight is unknown): not "could not connect", which a script
                // might retry blindly.
                _ => 1,
            },
            CliError::Timeout(_) => 4,
            CliError::Rejected(_) => 5,
            CliError::Other(_) => 1,
        }
    }

    /// The message printed after `error: `: `NAME (CODE): text` for server errors.
    pub fn message(&self) -> String {
        match self {
            CliError::Usage(m)
            | CliError::Input(m)
            | CliError::Timeout(m)
            | CliError::Unreachable(m)
            | CliError::Rejected(m) => m.clone(),
            CliError::Connect(e) | CliError::Client(e) => e.to_string(),
            CliError::Other(e) => format!("{e:#}"),
        }
    }

    /// Whether this is standard output closed by its reader (`relaymq-cli list queues |
    /// head -1`): not a failure worth a message, as for other shell tools.
    pub fn is_broken_pipe(&self) -> bool {
        match self {
            CliError::Other(e) => e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }),
            _ => false,
        }
    }
}

impl From<ClientError> for CliError {
    fn from(e: ClientError) -> CliError {
        CliError::Client(e)
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> CliError {
        CliError::Other(e.into())
    }
}

/// `NAME (CODE)` for a reply code, or `reply code CODE` outside the specification's list.
pub fn code_name(code: u16) -> String {
    match ReplyCode::from_u16(code) {
        Some(rc) => rc.to_string(),
        None => format!("reply code {code}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        let refused = ClientError::ChannelClosed {
            code: 404,
            text: "no queue 'x' in vhost '/'".into(),
        };
        let e = CliError::from(refused);
        assert_eq!(e.exit_code(), 1);
        assert_eq!(e.message(), "NOT_FOUND (404): no queue 'x' in vhost '/'");
        assert_eq!(CliError::from(ClientError::Timeout).exit_code(), 4);
        assert_eq!(CliError::Connect(ClientError::Timeout).exit_code(), 3);
        let lost = ClientError::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(
            CliError::from(lost).exit_code(),
            1,
            "lost midway is not 'cannot connect'"
        );
        assert_eq!(CliError::Usage("x".into()).exit_code(), 2);
        assert_eq!(CliError::Input("x".into()).exit_code(), 2);
        let pipe = CliError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(
            pipe.is_broken_pipe(),
            "a closed stdout reader is not an error"
        );
        assert!(!CliError::Usage("x".into()).is_broken_pipe());
        assert_eq!(CliError::Rejected("x".into()).exit_code(), 5);
        assert_eq!(code_name(312), "NO_ROUTE (312)");
    }
}
