//! Command-line parsing: global options, the command and its flags, `K=V` arguments and
//! `--property NAME=VALUE` message properties.

use super::CliError;
use relaymq::client::{ListKind, MemoryWatermark, TlsOptions};
use relaymq::types::{BasicProperties, FieldTable, FieldValue};
use std::ffi::OsString;
use std::time::Duration;

/// The full usage text (`--help`).
pub const USAGE: &str = "\
usage: relaymq-cli [--addr HOST:PORT] [--vhost VHOST] [--user USER] [--password PASSWORD]
                   [--tls --tls-ca FILE [--tls-cert FILE --tls-key FILE] [--tls-server-name NAME]]
                   COMMAND ...

global options (also from RELAYMQ_ADDR, RELAYMQ_VHOST, RELAYMQ_USER, RELAYMQ_PASSWORD):
  --addr HOST:PORT      server address (default 127.0.0.1:5673)
  --vhost VHOST         virtual host (default /)
  --user USER           user name (default guest)
  --password PASSWORD   password (default guest)
  --tls                 connect over TLS, to the server's --tls-listen port (default address
                        127.0.0.1:5674 unless --addr or RELAYMQ_ADDR says otherwise)
  --tls-ca FILE         PEM CA(s) the server's certificate must chain to (needed with --tls)
  --tls-cert FILE       PEM client certificate, for a server with --tls-client-ca
  --tls-key FILE        PEM private key of --tls-cert
  --tls-server-name NAME  name the server's certificate must carry (default: the host of
                        --addr; an IP address is checked against the certificate's IPs)
  -h, --help            print this help
  -V, --version         print the version

commands:
  declare exchange NAME --type direct|fanout|topic|headers|x-consistent-hash|x-delayed-message [--durable] [--auto-delete] [--internal] [--arg K=V]...
  declare queue NAME [--durable] [--exclusive] [--auto-delete] [--arg K=V]...   (prints the queue name)
  declare vhost NAME
  delete exchange NAME [--if-unused]
  delete queue NAME [--if-unused] [--if-empty]
  delete vhost NAME
  purge queue NAME                                   (prints the number of messages purged)
  bind QUEUE EXCHANGE [--key KEY] [--arg K=V]...
  unbind QUEUE EXCHANGE [--key KEY] [--arg K=V]...
  bind-exchange DESTINATION SOURCE [--key KEY] [--arg K=V]...
  unbind-exchange DESTINATION SOURCE [--key KEY] [--arg K=V]...
  publish EXCHANGE ROUTING_KEY [BODY] [--persistent] [--header K=V]... [--property NAME=VALUE]...
          [--mandatory] [--confirm] [--lines]
      without BODY the body is all of standard input; --lines: each input line is one message
      properties: content_type content_encoding correlation_id reply_to expiration message_id
                  timestamp type user_id app_id priority delivery_mode
  consume QUEUE [--count N] [--no-ack] [--prefetch N] [--timeout SECONDS] [--json]
  get QUEUE [--count N] [--requeue | --reject] [--json]
      acks what it prints; --requeue puts it back; --reject rejects it without requeue
      (dead-lettered, reason rejected, when the queue has a dead-letter exchange)
  peek QUEUE [--count N] [--offset N] [--json]
      ready messages from position N (0 = the head) without consuming them
  replay QUEUE --to-origin | --exchange X [--routing-key K] | --to-queue Q [--count N] [--json]
      moves messages (all unless --count) to the queue of their last x-death, an
      exchange or a queue; prints moved, skipped and refused
  search QUEUE TEXT [--in body,headers,properties] [--limit N] [--offset N] [--ignore-case] [--json]
      prints POSITION: BODY of each match, then where the next page starts
  unacked QUEUE [--limit N] [--json]
      deliveries awaiting their ack, oldest first: consumer, channel, tag, time out, body
  pause QUEUE | resume QUEUE
      stops deliveries to the queue's consumers (they stay attached) / starts them again
  list vhosts|exchanges|queues|bindings|consumers|connections|users|permissions|policies [--json]
  list vhost-limits|user-limits|parameters|global-parameters|operator-policies|shovels [--json]
  list federation-links [--json]                     vhost exchange upstream status uri error
      queues and vhosts show rates (messages/s over the last 5 s sample):
      publish_rate, deliver_get_rate, ack_rate
  status [--json]                                    (alarms: mem_alarm, disk_free_alarm, ...)

administration (the --user needs the administrator tag):
  user add NAME PASSWORD [--tags T,...]              tags: administrator, management, monitoring, policymaker
  user add NAME --password-hash HASH [--hashing-algorithm ALG] [--tags T,...]
      imports a hash as RabbitMQ exports it (default ALG rabbit_password_hashing_sha256);
      it is replaced by an argon2id hash at the user's first login
  user delete NAME                                   (closes the user's connections)
  user passwd NAME PASSWORD
  user tags NAME [T,...]
  user list [--json]
  permission set USER --configure RE --write RE --read RE   (in the --vhost)
  permission clear USER                              (in the --vhost)
  permission list [--json]
  close connection ID [--reason TEXT]                ID as 'list connections' shows it; the
      client gets 320 CONNECTION_FORCED - TEXT (like rabbitmqctl close_connection)
  export definitions [FILE|-]                        RabbitMQ's JSON format (stdout without FILE)
  import definitions FILE|-                          e.g. from rabbitmqctl export_definitions;
      prints what was created and what was not honoured
  migrate --from amqp://USER:PASS@HOST[:PORT] [--from-api URL] [--definitions FILE] [--no-wait]
      imports a RabbitMQ's definitions (its management API, default http://HOST:15672, or
      FILE), then moves every queue's messages with one shovel each (on-confirm), reporting
      progress until all are drained (docs/operations.md, Migrating from RabbitMQ)
  set memory-high-watermark FRACTION|SIZE            e.g. 0.4 (of the memory available; up to 1.0)
                                                     or 2GiB (at least 64MiB)
  set disk-free-limit SIZE                           e.g. 1GiB or 5GB; publishers are blocked below it
      (like rabbitmqctl set_vm_memory_high_watermark / set_disk_free_limit)
  set cluster-name NAME                              like rabbitmqctl set_cluster_name (the
      cluster_name global parameter; a policymaker may set it too)
  vhost-limit set NAME VALUE                         (in the --vhost) NAME max-connections or
      max-queues, VALUE an integer (negative: no limit), like rabbitmqctl set_vhost_limits
  vhost-limit clear NAME                             (in the --vhost)
  vhost-limit list [--json]                          every vhost's limits (management users:
      the vhosts they see)
  user-limit set USER NAME VALUE                     NAME max-connections or max-channels,
      like rabbitmqctl set_user_limits
  user-limit clear USER NAME|all
  user-limit list [--json]
  operator-policy set NAME PATTERN DEFINITION [--priority N] [--apply-to queues|exchanges|all]
      (in the --vhost) like rabbitmqctl set_operator_policy; DEFINITION keys: expires
      message-ttl max-length max-length-bytes delivery-limit overflow (the lower of policy
      and operator policy applies)
  operator-policy clear NAME                         (in the --vhost)
  operator-policy list [--json]                      every vhost's (management users: the
      vhosts they see)

policies (the --user needs the policymaker or administrator tag; in the --vhost):
  policy set NAME PATTERN DEFINITION [--priority N] [--apply-to queues|exchanges|all]
      (RabbitMQ 3.12's classic_queues = queues; quorum_queues, streams match nothing here)
      like rabbitmqctl set_policy: DEFINITION is a JSON object, e.g. '{\"max-length\":10}';
      keys: message-ttl expires max-length max-length-bytes overflow dead-letter-exchange
      dead-letter-routing-key delivery-limit (others RabbitMQ knows are kept, not acted on)
  policy clear NAME
  policy list [--json]
  parameter set COMPONENT NAME VALUE                 (in the --vhost) VALUE is JSON, like
      rabbitmqctl set_parameter; components: vhost-limits (name limits), operator_policy,
      shovel (as shovel set), federation-upstream, federation-upstream-set, federation
      (stored only)
  parameter clear COMPONENT NAME                     (in the --vhost)
  parameter list [--json]                            every vhost's (a policymaker: the vhosts
      it has permissions in)
  global-parameter set NAME VALUE                    VALUE is JSON, like rabbitmqctl
      set_global_parameter (cluster_name is the cluster's name)
  global-parameter clear NAME
  global-parameter list [--json]

shovels (set/clear are parameter set/clear of component shovel: policymaker or administrator):
  shovel set NAME JSON                               (in the --vhost) JSON as the parameter's
      value, e.g. '{\"src-uri\":\"amqp://\",\"src-queue\":\"a\",\"dest-uri\":\"amqp://\",\"dest-queue\":\"b\"}'
      (amqp:// without a host: this broker)
  shovel clear NAME                                  (in the --vhost) stops and deletes it
  shovel list [--vhost V] [--json]                   every shovel's status (state, source,
      destination, forwarded, pending, remaining; management users: the vhosts they see);
      with --vhost on the command line, that vhost's only

values: K=V gives an integer for a decimal integer that fits in 64 bits (a longer one stays
        a string), a boolean for true/false, else a string;
        K:=JSON gives any JSON value (n:='\"10\"' is the string 10).
exit codes: 0 ok, 1 refused by the server, 2 usage, 3 cannot connect or authenticate,
            4 timeout, 5 a message was nacked or returned (--confirm, --mandatory)";

/// The runtime parameter component `shovel set` and `shovel clear` act on.
const SHOVEL_COMPONENT: &str = relaymq::broker::shovel_definition::SHOVEL_COMPONENT;

/// Default address with `--tls`: the server's native TLS listener
/// (`relaymq-server --tls-listen`).
pub const TLS_ADDR_DEFAULT: &str = "127.0.0.1:5674";

/// Global options taking a value that set up TLS.
const TLS_VALUE_OPTIONS: &[&str] = &["tls-ca", "tls-cert", "tls-key", "tls-server-name"];

/// Where and as whom to connect.
#[derive(Clone, Debug, PartialEq)]
pub struct Global {
    /// `HOST:PORT`.
    pub addr: String,
    /// Virtual host.
    pub vhost: String,
    /// User name.
    pub user: String,
    /// Password.
    pub password: String,
    /// `--tls` and its files; `None`: plain TCP.
    pub tls: Option<TlsOptions>,
}

/// The TLS options as given, checked together at the end ([`TlsArgs::into_options`]).
#[derive(Default)]
struct TlsArgs {
    enabled: bool,
    ca: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    server_name: Option<String>,
}

impl TlsArgs {
    fn set(&mut self, name: &str, value: String) {
        let slot = match name {
            "tls-ca" => &mut self.ca,
            "tls-cert" => &mut self.cert,
            "tls-key" => &mut self.key,
            _ => &mut self.server_name,
        };
        *slot = Some(value);
    }

    fn into_options(self) -> Result<Option<TlsOptions>, CliError> {
        if !self.enabled {
            if self.ca.is_some()
                || self.cert.is_some()
                || self.key.is_some()
                || self.server_name.is_some()
            {
                return Err(CliError::Usage(
                    "--tls-ca, --tls-cert, --tls-key and --tls-server-name need --tls".into(),
                ));
            }
            return Ok(None);
        }
        let Some(ca) = self.ca else {
            return Err(CliError::Usage(
                "--tls needs --tls-ca FILE: the CA that signed the server's certificate".into(),
            ));
        };
        if self.cert.is_some() != self.key.is_some() {
            return Err(CliError::Usage(
                "--tls-cert and --tls-key go together (a client certificate and its key)".into(),
            ));
        }
        Ok(Some(TlsOptions {
            ca_file: ca.into(),
            cert_file: self.cert.map(Into::into),
            key_file: self.key.map(Into::into),
            server_name: self.server_name,
        }))
    }
}

/// Arguments of `publish`.
#[derive(Clone, Debug, PartialEq)]
pub struct PublishArgs {
    /// Exchange ("" is the default exchange).
    pub exchange: String,
    /// Routing key.
    pub routing_key: String,
    /// The body given on the command line; `None` reads standard input.
    pub body: Option<String>,
    /// Properties, `--persistent` and `--header`s included.
    pub properties: BasicProperties,
    /// Ask for a `basic.return` of unroutable messages.
    pub mandatory: bool,
    /// Wait for publisher confirms.
    pub confirm: bool,
    /// One message per input line.
    pub lines: bool,
}

/// Arguments of `consume`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConsumeArgs {
    /// Queue to consume from.
    pub queue: String,
    /// Stop after this many messages.
    pub count: Option<u64>,
    /// Consume without acknowledgements.
    pub no_ack: bool,
    /// Prefetch count (defaults to `count` when given).
    pub prefetch: Option<u16>,
    /// Total time to run.
    pub timeout: Option<Duration>,
    /// One JSON object per delivery.
    pub json: bool,
}

/// Arguments of `get`.
#[derive(Clone, Debug, PartialEq)]
pub struct GetArgs {
    /// Queue to fetch from.
    pub queue: String,
    /// Fetch at most this many messages.
    pub count: u64,
    /// Put the messages back (nack with requeue) instead of acking them.
    pub requeue: bool,
    /// Reject each message without requeue (dead-letters it when its queue has a
    /// dead-letter exchange) instead of acking it.
    pub reject: bool,
    /// One JSON object per message.
    pub json: bool,
}

/// One command to run.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// `declare exchange`.
    DeclareExchange {
        /// Exchange name.
        name: String,
        /// Exchange type.
        kind: String,
        /// Flags and arguments.
        options: relaymq::client::ExchangeDeclareOptions,
    },
    /// `declare queue`.
    DeclareQueue {
        /// Queue name ("" for a generated one).
        name: String,
        /// Flags and arguments.
        options: relaymq::client::QueueDeclareOptions,
    },
    /// `declare vhost`.
    DeclareVhost(String),
    /// `delete vhost`.
    DeleteVhost(String),
    /// `delete exchange`.
    DeleteExchange {
        /// Exchange name.
        name: String,
        /// Only when it has no bindings.
        if_unused: bool,
    },
    /// `delete queue`.
    DeleteQueue {
        /// Queue name.
        name: String,
        /// Only without consumers.
        if_unused: bool,
        /// Only without messages.
        if_empty: bool,
    },
    /// `purge queue`.
    PurgeQueue(String),
    /// `bind` / `unbind` (queue to exchange) and `bind-exchange` / `unbind-exchange`.
    Binding {
        /// Whether the destination is an exchange.
        exchange_to_exchange: bool,
        /// Bind or unbind.
        bind: bool,
        /// Queue or destination exchange.
        destination: String,
        /// Source exchange.
        source: String,
        /// Binding key.
        key: String,
        /// Binding arguments.
        arguments: FieldTable,
    },
    /// `publish` (boxed: properties make it the largest variant by far).
    Publish(Box<PublishArgs>),
    /// `consume`.
    Consume(ConsumeArgs),
    /// `get`.
    Get(GetArgs),
    /// `list`.
    List {
        /// What to list.
        kind: ListKind,
        /// JSON output.
        json: bool,
    },
    /// `shovel list` / `list shovels`: every shovel's status the user may see.
    ListShovels {
        /// Only this vhost's (`--vhost` given on the command line); `None`: every vhost's.
        vhost: Option<String>,
        /// JSON output.
        json: bool,
    },
    /// `status`.
    Status {
        /// JSON output.
        json: bool,
    },
    /// `user add|delete|passwd|tags`.
    User(UserCommand),
    /// `permission set|clear` (in the global `--vhost`).
    Permission(PermissionCommand),
    /// `policy set|clear` (in the global `--vhost`).
    Policy(PolicyCommand),
    /// `operator-policy set|clear` (in the global `--vhost`).
    OperatorPolicy(PolicyCommand),
    /// `vhost-limit set|clear` (in the global `--vhost`).
    VhostLimit(ValueCommand),
    /// `user-limit set|clear USER ...`.
    UserLimit {
        /// User name.
        user: String,
        /// What to do with which limit.
        command: ValueCommand,
    },
    /// `parameter set|clear COMPONENT ...` and `shovel set|clear` (component `shovel`),
    /// in the global `--vhost`.
    Parameter {
        /// Component (`federation-upstream`, `vhost-limits`, …).
        component: String,
        /// What to do with which parameter.
        command: ValueCommand,
    },
    /// `global-parameter set|clear`.
    GlobalParameter(ValueCommand),
    /// `set cluster-name NAME`.
    SetClusterName(String),
    /// `set memory-high-watermark`.
    SetMemoryHighWatermark(MemoryWatermark),
    /// `set disk-free-limit`, in bytes.
    SetDiskFreeLimit(u64),
    /// `close connection ID [--reason TEXT]`.
    CloseConnection {
        /// Connection id (`list connections`).
        id: u64,
        /// Reason the client is given (empty: the server's default).
        reason: String,
    },
    /// `export definitions [FILE]`: `None` or `-` is standard output.
    ExportDefinitions(Option<String>),
    /// `import definitions FILE` (`-` is standard input).
    ImportDefinitions(String),
    /// `migrate --from URI [--from-api URL] [--definitions FILE] [--no-wait]`.
    Migrate(super::migrate::MigrateArgs),
    /// `pause QUEUE` (`true`) or `resume QUEUE` (`false`).
    PauseQueue {
        /// Queue name.
        queue: String,
        /// Pause rather than resume.
        paused: bool,
    },
    /// `peek`, `replay`, `search`: a queue tool with its JSON request (docs/http-api.md
    /// §3.5).
    QueueTool {
        /// Which tool.
        tool: QueueTool,
        /// Queue name.
        queue: String,
        /// The request, as the HTTP API takes it.
        request: serde_json::Value,
        /// Print the answer's JSON.
        json: bool,
    },
}

/// A queue tool of the CLI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueTool {
    /// `peek`.
    Peek,
    /// `replay`.
    Replay,
    /// `search`.
    Search,
    /// `unacked`.
    Unacked,
}

/// A `user` subcommand.
#[derive(Clone, Debug, PartialEq)]
pub enum UserCommand {
    /// `user add NAME PASSWORD` or `user add NAME --password-hash HASH`.
    Add {
        /// User name.
        name: String,
        /// Password, or the hash when `hashing_algorithm` is set.
        secret: String,
        /// `None` for a password in clear.
        hashing_algorithm: Option<String>,
        /// Tags.
        tags: Vec<String>,
    },
    /// `user delete NAME`.
    Delete(String),
    /// `user passwd NAME PASSWORD`.
    Passwd(String, String),
    /// `user tags NAME [T,...]`.
    Tags(String, Vec<String>),
}

/// A `permission` subcommand.
#[derive(Clone, Debug, PartialEq)]
pub enum PermissionCommand {
    /// `permission set USER --configure RE --write RE --read RE`.
    Set {
        /// User name.
        user: String,
        /// Configure pattern.
        configure: String,
        /// Write pattern.
        write: String,
        /// Read pattern.
        read: String,
    },
    /// `permission clear USER`.
    Clear(String),
}

/// A `policy` subcommand (rabbitmqctl's `set_policy`, `clear_policy`).
#[derive(Clone, Debug, PartialEq)]
pub enum PolicyCommand {
    /// `policy set NAME PATTERN DEFINITION [--priority N] [--apply-to WHAT]`.
    Set {
        /// Policy name.
        name: String,
        /// Regular expression over names.
        pattern: String,
        /// The definition, a JSON object as text.
        definition: String,
        /// Priority (default 0).
        priority: i64,
        /// `queues`, `exchanges` or `all` (default `all`, as RabbitMQ).
        apply_to: String,
    },
    /// `policy clear NAME`.
    Clear(String),
}

/// A `set NAME VALUE` / `clear NAME` subcommand of a limit or parameter
/// (`vhost-limit`, `user-limit`, `parameter`, `global-parameter`, `shovel`).
#[derive(Clone, Debug, PartialEq)]
pub enum ValueCommand {
    /// `set NAME VALUE`; the value as JSON text.
    Set {
        /// Limit or parameter name.
        name: String,
        /// The value, JSON text.
        value: String,
    },
    /// `clear NAME`.
    Clear(String),
}

/// What the command line asks for.
#[allow(
    clippy::large_enum_variant,
    reason = "made once per run, never stored in bulk"
)]
#[derive(Clone, Debug, PartialEq)]
pub enum Invocation {
    /// Print the usage text.
    Help,
    /// Print the version.
    Version,
    /// Run a command.
    Run(Global, Command),
}

/// Options taking a value (global and per command).
const VALUE_OPTIONS: &[&str] = &[
    "reason",
    "addr",
    "vhost",
    "user",
    "password",
    "type",
    "arg",
    "key",
    "header",
    "property",
    "count",
    "prefetch",
    "timeout",
    "tags",
    "password-hash",
    "hashing-algorithm",
    "configure",
    "write",
    "read",
    "priority",
    "apply-to",
    "offset",
    "exchange",
    "routing-key",
    "to-queue",
    "in",
    "limit",
    "from",
    "from-api",
    "definitions",
];

/// Options without a value.
const FLAG_OPTIONS: &[&str] = &[
    "durable",
    "auto-delete",
    "internal",
    "exclusive",
    "if-unused",
    "if-empty",
    "persistent",
    "mandatory",
    "confirm",
    "lines",
    "no-ack",
    "requeue",
    "reject",
    "json",
    "to-origin",
    "ignore-case",
    "no-wait",
];

/// The tokens of a command line: positionals and command options in order.
struct Raw {
    positionals: Vec<String>,
    options: Vec<(String, Option<String>)>,
    /// The `--vhost` given on the command line (not from `RELAYMQ_VHOST`): narrows `shovel
    /// list`.
    vhost: Option<String>,
}

impl Raw {
    /// Whether the flag was given (removing it).
    fn flag(&mut self, name: &str) -> bool {
        let before = self.options.len();
        self.options.retain(|(n, _)| n != name);
        self.options.len() != before
    }

    /// Every value of a repeatable option, in order (removing them).
    fn values(&mut self, name: &str) -> Vec<String> {
        let (taken, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.options)
            .into_iter()
            .partition(|(n, _)| n == name);
        self.options = kept;
        taken.into_iter().filter_map(|(_, v)| v).collect()
    }

    /// The value of a single-use option (removing it).
    fn value(&mut self, name: &str) -> Result<Option<String>, CliError> {
        let mut v = self.values(name);
        if v.len() > 1 {
            return Err(CliError::Usage(format!("--{name} given more than once")));
        }
        Ok(v.pop())
    }

    /// Fails when an option was left over (not valid for the command).
    fn finish(self, command: &str) -> Result<(), CliError> {
        match self.options.first() {
            Some((n, _)) => Err(CliError::Usage(format!(
                "option --{n} is not valid for '{command}'"
            ))),
            None => Ok(()),
        }
    }

    /// Exactly `names.len()` positionals after the command words.
    fn positionals<const N: usize>(
        &self,
        command: &str,
        names: [&str; N],
    ) -> Result<[String; N], CliError> {
        exact(command, &self.positionals, names)
    }
}

fn exact<const N: usize>(
    command: &str,
    got: &[String],
    names: [&str; N],
) -> Result<[String; N], CliError> {
    if got.len() < N {
        return Err(CliError::Usage(format!(
            "'{command}' needs {}",
            names[got.len()..].join(" ")
        )));
    }
    if got.len() > N {
        return Err(CliError::Usage(format!(
            "unexpected argument '{}' for '{command}'",
            got[N]
        )));
    }
    Ok(std::array::from_fn(|i| got[i].clone()))
}

/// Parses the arguments after the program name; `env` looks up environment variables.
///
/// # Errors
/// [`CliError::Usage`] for an unknown command or option, a missing or extra argument, or
/// a value that does not parse.
pub fn parse(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Invocation, CliError> {
    let env_addr = env("RELAYMQ_ADDR");
    let mut addr_given = env_addr.is_some();
    let mut tls = TlsArgs::default();
    let mut global = Global {
        addr: env_addr.unwrap_or_else(|| "127.0.0.1:5673".into()),
        vhost: env("RELAYMQ_VHOST").unwrap_or_else(|| "/".into()),
        user: env("RELAYMQ_USER").unwrap_or_else(|| "guest".into()),
        password: env("RELAYMQ_PASSWORD").unwrap_or_else(|| "guest".into()),
        tls: None,
    };
    let mut raw = Raw {
        positionals: Vec::new(),
        options: Vec::new(),
        vhost: None,
    };
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next().map_err(usage)? {
        match arg {
            lexopt::Arg::Short('h') | lexopt::Arg::Long("help") => return Ok(Invocation::Help),
            lexopt::Arg::Short('V') | lexopt::Arg::Long("version") => {
                return Ok(Invocation::Version)
            }
            // A negative number is a value, not options (`vhost-limit set max-queues -1`,
            // as rabbitmqctl takes it): the digit and the rest of the word.
            lexopt::Arg::Short(c) if c.is_ascii_digit() => {
                let rest = parser.optional_value().map(utf8).transpose()?;
                raw.positionals
                    .push(format!("-{c}{}", rest.unwrap_or_default()));
            }
            lexopt::Arg::Short(c) => return Err(CliError::Usage(format!("unknown option -{c}"))),
            lexopt::Arg::Long("tls") => tls.enabled = true,
            lexopt::Arg::Long(name) if TLS_VALUE_OPTIONS.contains(&name) => {
                let name = name.to_string();
                tls.set(&name, utf8(parser.value().map_err(usage)?)?);
            }
            lexopt::Arg::Long(name) if VALUE_OPTIONS.contains(&name) => {
                let name = name.to_string();
                let value = utf8(parser.value().map_err(usage)?)?;
                match name.as_str() {
                    "addr" => {
                        global.addr = value;
                        addr_given = true;
                    }
                    "vhost" => {
                        global.vhost = value.clone();
                        raw.vhost = Some(value);
                    }
                    "user" => global.user = value,
                    "password" => global.password = value,
                    _ => raw.options.push((name, Some(value))),
                }
            }
            lexopt::Arg::Long(name) if FLAG_OPTIONS.contains(&name) => {
                raw.options.push((name.to_string(), None));
            }
            lexopt::Arg::Long(name) => {
                return Err(CliError::Usage(format!("unknown option --{name}")));
            }
            lexopt::Arg::Value(v) => raw.positionals.push(utf8(v)?),
        }
    }
    global.tls = tls.into_options()?;
    if global.tls.is_some() && !addr_given {
        global.addr = TLS_ADDR_DEFAULT.into();
    }
    let command = command(raw)?;
    Ok(Invocation::Run(global, command))
}

fn usage(e: lexopt::Error) -> CliError {
    CliError::Usage(e.to_string())
}

fn utf8(v: OsString) -> Result<String, CliError> {
    v.into_string()
        .map_err(|v| CliError::Usage(format!("argument {v:?} is not valid UTF-8")))
}

/// Builds the command from the positionals and options.
fn command(mut raw: Raw) -> Result<Command, CliError> {
    if raw.positionals.is_empty() {
        return Err(CliError::Usage("no command given".into()));
    }
    let word = raw.positionals.remove(0);
    let cmd = match word.as_str() {
        "declare" | "delete" | "purge" => {
            if raw.positionals.is_empty() {
                return Err(CliError::Usage(format!("'{word}' needs an object type")));
            }
            let object = raw.positionals.remove(0);
            let name = format!("{word} {object}");
            let cmd = object_command(&mut raw, &word, &object, &name)?;
            raw.finish(&name)?;
            return Ok(cmd);
        }
        "bind" | "unbind" | "bind-exchange" | "unbind-exchange" => {
            let e2e = word.ends_with("-exchange");
            let names = if e2e {
                ["DESTINATION", "SOURCE"]
            } else {
                ["QUEUE", "EXCHANGE"]
            };
            let [destination, source] = raw.positionals(&word, names)?;
            Command::Binding {
                exchange_to_exchange: e2e,
                bind: word.starts_with("bind"),
                destination,
                source,
                key: raw.value("key")?.unwrap_or_default(),
                arguments: table(raw.values("arg"))?,
            }
        }
        "publish" => publish(&mut raw)?,
        "consume" => {
            let [queue] = raw.positionals("consume", ["QUEUE"])?;
            let count = count(&mut raw)?;
            Command::Consume(ConsumeArgs {
                queue,
                count,
                no_ack: raw.flag("no-ack"),
                prefetch: prefetch(&mut raw)?,
                timeout: timeout(&mut raw)?,
                json: raw.flag("json"),
            })
        }
        "get" => {
            let [queue] = raw.positionals("get", ["QUEUE"])?;
            let (requeue, reject) = (raw.flag("requeue"), raw.flag("reject"));
            if requeue && reject {
                return Err(CliError::Usage(
                    "get: --requeue and --reject cannot be combined".into(),
                ));
            }
            Command::Get(GetArgs {
                queue,
                count: count(&mut raw)?.unwrap_or(1),
                requeue,
                reject,
                json: raw.flag("json"),
            })
        }
        "unacked" => {
            let [queue] = raw.positionals("unacked", ["QUEUE"])?;
            let mut request = serde_json::json!({});
            if let Some(n) = number::<u64>(&mut raw, "limit")? {
                request["limit"] = n.into();
            }
            Command::QueueTool {
                tool: QueueTool::Unacked,
                queue,
                request,
                json: raw.flag("json"),
            }
        }
        "pause" => {
            let [queue] = raw.positionals("pause", ["QUEUE"])?;
            Command::PauseQueue {
                queue,
                paused: true,
            }
        }
        "resume" => {
            let [queue] = raw.positionals("resume", ["QUEUE"])?;
            Command::PauseQueue {
                queue,
                paused: false,
            }
        }
        "peek" => {
            let [queue] = raw.positionals("peek", ["QUEUE"])?;
            let mut request = serde_json::json!({});
            if let Some(n) = count(&mut raw)? {
                request["count"] = n.into();
            }
            if let Some(n) = number::<u64>(&mut raw, "offset")? {
                request["offset"] = n.into();
            }
            Command::QueueTool {
                tool: QueueTool::Peek,
                queue,
                request,
                json: raw.flag("json"),
            }
        }
        "replay" => {
            let [queue] = raw.positionals("replay", ["QUEUE"])?;
            let origin = raw.flag("to-origin");
            let exchange = raw.value("exchange")?;
            let routing_key = raw.value("routing-key")?;
            let to_queue = raw.value("to-queue")?;
            let mut request = match (origin, exchange, to_queue) {
                (true, None, None) => serde_json::json!({"target": "origin"}),
                (false, Some(x), None) => serde_json::json!({
                    "target": "exchange",
                    "exchange": x,
                    "routing_key": routing_key.clone().unwrap_or_default(),
                }),
                (false, None, Some(q)) => serde_json::json!({"target": "queue", "queue": q}),
                _ => {
                    return Err(CliError::Usage(
                        "replay needs one of --to-origin, --exchange X or --to-queue Q".into(),
                    ))
                }
            };
            if routing_key.is_some() && request["target"] != "exchange" {
                return Err(CliError::Usage("--routing-key goes with --exchange".into()));
            }
            if let Some(n) = count(&mut raw)? {
                request["count"] = n.into();
            }
            Command::QueueTool {
                tool: QueueTool::Replay,
                queue,
                request,
                json: raw.flag("json"),
            }
        }
        "search" => {
            let [queue, text] = raw.positionals("search", ["QUEUE", "TEXT"])?;
            let mut request = serde_json::json!({"query": text});
            if let Some(places) = raw.value("in")? {
                let places: Vec<&str> = places.split(',').filter(|p| !p.is_empty()).collect();
                request["in"] = places.into();
            }
            if let Some(n) = number::<u64>(&mut raw, "limit")? {
                request["limit"] = n.into();
            }
            if let Some(n) = number::<u64>(&mut raw, "offset")? {
                request["offset"] = n.into();
            }
            if raw.flag("ignore-case") {
                request["ignore_case"] = true.into();
            }
            Command::QueueTool {
                tool: QueueTool::Search,
                queue,
                request,
                json: raw.flag("json"),
            }
        }
        "user" | "permission" | "policy" | "operator-policy" | "vhost-limit" | "user-limit"
        | "parameter" | "global-parameter" | "shovel" => {
            if raw.positionals.is_empty() {
                return Err(CliError::Usage(format!(
                    "'{word}' needs a subcommand: {}",
                    if word == "user" {
                        "add, delete, passwd, tags or list"
                    } else {
                        "set, clear or list"
                    }
                )));
            }
            let sub = raw.positionals.remove(0);
            let name = format!("{word} {sub}");
            let cmd = admin_command(&mut raw, &word, &sub, &name)?;
            raw.finish(&name)?;
            return Ok(cmd);
        }
        "list" => {
            let [what] = raw.positionals(
                "list",
                [
                    "vhosts|exchanges|queues|bindings|consumers|connections|users|permissions|\
                  policies|vhost-limits|user-limits|parameters|global-parameters|\
                  operator-policies|shovels|federation-links",
                ],
            )?;
            match list_kind(&what)? {
                ListKind::Shovels => Command::ListShovels {
                    vhost: raw.vhost.clone(),
                    json: raw.flag("json"),
                },
                kind => Command::List {
                    kind,
                    json: raw.flag("json"),
                },
            }
        }
        "status" => {
            raw.positionals("status", [])?;
            Command::Status {
                json: raw.flag("json"),
            }
        }
        "set" => {
            let [what, value] = raw.positionals(
                "set",
                [
                    "memory-high-watermark|disk-free-limit|cluster-name",
                    "VALUE",
                ],
            )?;
            match what.as_str() {
                "memory-high-watermark" => Command::SetMemoryHighWatermark(
                    MemoryWatermark::parse(&value)
                        .map_err(|e| CliError::Usage(format!("set memory-high-watermark: {e}")))?,
                ),
                "disk-free-limit" => Command::SetDiskFreeLimit(
                    relaymq::types::size::parse_size(&value)
                        .map_err(|e| CliError::Usage(format!("set disk-free-limit: {e}")))?,
                ),
                "cluster-name" => Command::SetClusterName(value),
                other => {
                    return Err(CliError::Usage(format!(
                        "cannot set '{other}': use memory-high-watermark, disk-free-limit or \
                         cluster-name"
                    )))
                }
            }
        }
        "close" => {
            let [what, id] = raw.positionals("close", ["connection", "ID"])?;
            if what != "connection" {
                return Err(CliError::Usage(format!(
                    "cannot close '{what}': use close connection ID"
                )));
            }
            Command::CloseConnection {
                id: id.parse().map_err(|_| {
                    CliError::Usage(format!(
                        "close connection: ID must be a number as 'list connections' shows, not '{id}'"
                    ))
                })?,
                reason: raw.value("reason")?.unwrap_or_default(),
            }
        }
        "export" | "import" => {
            let (what, file) = match raw.positionals.as_slice() {
                [what] if word == "export" => (what.clone(), None),
                [what, file] => (what.clone(), Some(file.clone())),
                _ => {
                    return Err(CliError::Usage(format!(
                        "usage: {word} definitions {}",
                        if word == "export" { "[FILE]" } else { "FILE" }
                    )))
                }
            };
            if what != "definitions" {
                return Err(CliError::Usage(format!(
                    "cannot {word} '{what}': use {word} definitions"
                )));
            }
            match (word.as_str(), file) {
                ("export", file) => Command::ExportDefinitions(file.filter(|f| f != "-")),
                (_, Some(file)) => Command::ImportDefinitions(file),
                (_, None) => return Err(CliError::Usage("import definitions needs FILE".into())),
            }
        }
        "migrate" => {
            raw.positionals("migrate", [])?;
            let from = raw.value("from")?.ok_or_else(|| {
                CliError::Usage(
                    "migrate needs --from amqp://USER:PASS@HOST[:PORT] (the source broker)".into(),
                )
            })?;
            Command::Migrate(super::migrate::MigrateArgs {
                from,
                api: raw.value("from-api")?,
                definitions: raw.value("definitions")?,
                wait: !raw.flag("no-wait"),
            })
        }
        "help" => return Err(CliError::Usage("use --help".into())),
        other => return Err(CliError::Usage(format!("unknown command '{other}'"))),
    };
    raw.finish(&word)?;
    Ok(cmd)
}

/// `declare`, `delete` and `purge` of an exchange, queue or vhost.
fn object_command(
    raw: &mut Raw,
    word: &str,
    object: &str,
    name: &str,
) -> Result<Command, CliError> {
    let [object_name] = raw.positionals(name, ["NAME"])?;
    Ok(match (word, object) {
        ("declare", "exchange") => {
            let kind = raw
                .value("type")?
                .ok_or_else(|| CliError::Usage("'declare exchange' needs --type".into()))?;
            Command::DeclareExchange {
                name: object_name,
                kind,
                options: relaymq::client::ExchangeDeclareOptions {
                    passive: false,
                    durable: raw.flag("durable"),
                    auto_delete: raw.flag("auto-delete"),
                    internal: raw.flag("internal"),
                    arguments: table(raw.values("arg"))?,
                },
            }
        }
        ("declare", "queue") => Command::DeclareQueue {
            name: object_name,
            options: relaymq::client::QueueDeclareOptions {
                passive: false,
                durable: raw.flag("durable"),
                exclusive: raw.flag("exclusive"),
                auto_delete: raw.flag("auto-delete"),
                arguments: table(raw.values("arg"))?,
            },
        },
        ("declare", "vhost") => Command::DeclareVhost(object_name),
        ("delete", "vhost") => Command::DeleteVhost(object_name),
        ("delete", "exchange") => Command::DeleteExchange {
            name: object_name,
            if_unused: raw.flag("if-unused"),
        },
        ("delete", "queue") => Command::DeleteQueue {
            name: object_name,
            if_unused: raw.flag("if-unused"),
            if_empty: raw.flag("if-empty"),
        },
        ("purge", "queue") => Command::PurgeQueue(object_name),
        _ => return Err(CliError::Usage(format!("unknown command '{name}'"))),
    })
}

fn publish(raw: &mut Raw) -> Result<Command, CliError> {
    let (exchange, routing_key, body) = if raw.positionals.len() <= 2 {
        let [e, k] = raw.positionals("publish", ["EXCHANGE", "ROUTING_KEY"])?;
        (e, k, None)
    } else {
        let [e, k, b] = raw.positionals("publish", ["EXCHANGE", "ROUTING_KEY", "BODY"])?;
        (e, k, Some(b))
    };
    let mut properties = BasicProperties::default();
    for p in raw.values("property") {
        set_property(&mut properties, &p)?;
    }
    if raw.flag("persistent") {
        properties.delivery_mode = Some(2);
    }
    let headers = table(raw.values("header"))?;
    if !headers.is_empty() {
        properties.headers = Some(headers);
    }
    let lines = raw.flag("lines");
    if lines && body.is_some() {
        return Err(CliError::Usage(
            "--lines reads standard input: give no BODY".into(),
        ));
    }
    Ok(Command::Publish(Box::new(PublishArgs {
        exchange,
        routing_key,
        body,
        properties,
        mandatory: raw.flag("mandatory"),
        confirm: raw.flag("confirm"),
        lines,
    })))
}

fn number<T: std::str::FromStr>(raw: &mut Raw, name: &str) -> Result<Option<T>, CliError> {
    match raw.value(name)? {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| CliError::Usage(format!("--{name}: '{v}' is not a valid number"))),
    }
}

fn prefetch(raw: &mut Raw) -> Result<Option<u16>, CliError> {
    match number::<u64>(raw, "prefetch")? {
        None => Ok(None),
        Some(n) => u16::try_from(n)
            .map(Some)
            .map_err(|_| CliError::Usage(format!("--prefetch: {n} is out of range (0 to 65535)"))),
    }
}

fn count(raw: &mut Raw) -> Result<Option<u64>, CliError> {
    match number::<u64>(raw, "count")? {
        Some(0) => Err(CliError::Usage("--count must be at least 1".into())),
        n => Ok(n),
    }
}

fn timeout(raw: &mut Raw) -> Result<Option<Duration>, CliError> {
    match number::<f64>(raw, "timeout")? {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(CliError::Usage(format!(
            "--timeout: {s} is not a positive number of seconds"
        ))),
    }
}

/// `user …`, `permission …`, `policy …`, `operator-policy …`, `vhost-limit …`, `user-limit …`,
/// `parameter …`, `global-parameter …` and `shovel …`.
fn admin_command(raw: &mut Raw, word: &str, sub: &str, name: &str) -> Result<Command, CliError> {
    let tags = |raw: &mut Raw| -> Result<Vec<String>, CliError> {
        Ok(raw
            .value("tags")?
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect())
    };
    Ok(match (word, sub) {
        ("user", "add") => {
            let hash = raw.value("password-hash")?;
            let algorithm = raw.value("hashing-algorithm")?;
            match hash {
                Some(hash) => {
                    let [user] = raw.positionals(name, ["NAME"])?;
                    Command::User(UserCommand::Add {
                        name: user,
                        secret: hash,
                        hashing_algorithm: Some(
                            algorithm.unwrap_or_else(|| "rabbit_password_hashing_sha256".into()),
                        ),
                        tags: tags(raw)?,
                    })
                }
                None => {
                    if algorithm.is_some() {
                        return Err(CliError::Usage(
                            "user add: --hashing-algorithm needs --password-hash".into(),
                        ));
                    }
                    let [user, password] = raw.positionals(name, ["NAME", "PASSWORD"])?;
                    Command::User(UserCommand::Add {
                        name: user,
                        secret: password,
                        hashing_algorithm: None,
                        tags: tags(raw)?,
                    })
                }
            }
        }
        ("user", "delete") => {
            let [user] = raw.positionals(name, ["NAME"])?;
            Command::User(UserCommand::Delete(user))
        }
        ("user", "passwd") => {
            let [user, password] = raw.positionals(name, ["NAME", "PASSWORD"])?;
            Command::User(UserCommand::Passwd(user, password))
        }
        ("user", "tags") => {
            let (user, list) = match raw.positionals.as_slice() {
                [user] => (user.clone(), String::new()),
                [user, list] => (user.clone(), list.clone()),
                _ => {
                    return Err(CliError::Usage(format!("'{name}' needs NAME [T,...]")));
                }
            };
            raw.positionals.clear();
            let tags = list
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect();
            Command::User(UserCommand::Tags(user, tags))
        }
        ("shovel", "list") => {
            raw.positionals(name, [])?;
            Command::ListShovels {
                vhost: raw.vhost.clone(),
                json: raw.flag("json"),
            }
        }
        (_, "list") => {
            raw.positionals(name, [])?;
            Command::List {
                kind: match word {
                    "user" => ListKind::Users,
                    "policy" => ListKind::Policies,
                    "operator-policy" => ListKind::OperatorPolicies,
                    "vhost-limit" => ListKind::VhostLimits,
                    "user-limit" => ListKind::UserLimits,
                    "parameter" => ListKind::Parameters,
                    "global-parameter" => ListKind::GlobalParameters,
                    _ => ListKind::Permissions,
                },
                json: raw.flag("json"),
            }
        }
        ("permission", "set") => {
            let [user] = raw.positionals(name, ["USER"])?;
            let mut pattern = |what: &str| -> Result<String, CliError> {
                raw.value(what)?.ok_or_else(|| {
                    CliError::Usage(format!(
                        "'{name}' needs --configure, --write and --read (use '' for none, \
                         '.*' for all)"
                    ))
                })
            };
            Command::Permission(PermissionCommand::Set {
                user,
                configure: pattern("configure")?,
                write: pattern("write")?,
                read: pattern("read")?,
            })
        }
        ("permission", "clear") => {
            let [user] = raw.positionals(name, ["USER"])?;
            Command::Permission(PermissionCommand::Clear(user))
        }
        ("policy", "set") => Command::Policy(policy_set(raw, name)?),
        ("operator-policy", "set") => Command::OperatorPolicy(policy_set(raw, name)?),
        ("operator-policy", "clear") => {
            let [policy] = raw.positionals(name, ["NAME"])?;
            Command::OperatorPolicy(PolicyCommand::Clear(policy))
        }
        ("vhost-limit", "set") => {
            let [limit, value] = raw.positionals(name, ["NAME", "VALUE"])?;
            Command::VhostLimit(ValueCommand::Set {
                name: limit,
                value: limit_value(&value),
            })
        }
        ("vhost-limit", "clear") => {
            let [limit] = raw.positionals(name, ["NAME"])?;
            Command::VhostLimit(ValueCommand::Clear(limit))
        }
        ("user-limit", "set") => {
            let [user, limit, value] = raw.positionals(name, ["USER", "NAME", "VALUE"])?;
            Command::UserLimit {
                user,
                command: ValueCommand::Set {
                    name: limit,
                    value: limit_value(&value),
                },
            }
        }
        ("user-limit", "clear") => {
            let [user, limit] = raw.positionals(name, ["USER", "NAME|all"])?;
            Command::UserLimit {
                user,
                command: ValueCommand::Clear(limit),
            }
        }
        ("parameter", "set") => {
            let [component, parameter, value] =
                raw.positionals(name, ["COMPONENT", "NAME", "VALUE"])?;
            Command::Parameter {
                component,
                command: ValueCommand::Set {
                    name: parameter,
                    value,
                },
            }
        }
        ("parameter", "clear") => {
            let [component, parameter] = raw.positionals(name, ["COMPONENT", "NAME"])?;
            Command::Parameter {
                component,
                command: ValueCommand::Clear(parameter),
            }
        }
        ("shovel", "set") => {
            // The value goes as given: the server checks it and refuses with the API's
            // text (`not_json`, `Validation failed …`).
            let [shovel, value] = raw.positionals(name, ["NAME", "JSON"])?;
            Command::Parameter {
                component: SHOVEL_COMPONENT.into(),
                command: ValueCommand::Set {
                    name: shovel,
                    value,
                },
            }
        }
        ("shovel", "clear") => {
            let [shovel] = raw.positionals(name, ["NAME"])?;
            Command::Parameter {
                component: SHOVEL_COMPONENT.into(),
                command: ValueCommand::Clear(shovel),
            }
        }
        ("global-parameter", "set") => {
            let [parameter, value] = raw.positionals(name, ["NAME", "VALUE"])?;
            Command::GlobalParameter(ValueCommand::Set {
                name: parameter,
                value,
            })
        }
        ("global-parameter", "clear") => {
            let [parameter] = raw.positionals(name, ["NAME"])?;
            Command::GlobalParameter(ValueCommand::Clear(parameter))
        }
        ("policy", "clear") => {
            let [policy] = raw.positionals(name, ["NAME"])?;
            Command::Policy(PolicyCommand::Clear(policy))
        }
        _ => return Err(CliError::Usage(format!("unknown command '{name}'"))),
    })
}

/// A limit's VALUE as JSON text: JSON as given (`10`, `-1`), anything else as a JSON
/// string, so the server refuses it with the management API's text (`max-queues should be
/// a number, actually was <<"ten">>`) rather than the shell tool with its own.
fn limit_value(value: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(value) {
        Ok(_) => value.to_string(),
        Err(_) => serde_json::Value::String(value.to_string()).to_string(),
    }
}

/// `policy set` and `operator-policy set`: `NAME PATTERN DEFINITION [--priority N]
/// [--apply-to WHAT]`, as rabbitmqctl's `set_policy` and `set_operator_policy`.
///
/// # Errors
/// [`CliError::Usage`] for a missing argument, a DEFINITION that is not a JSON object, a
/// priority that is not an integer or an apply-to the server does not take.
fn policy_set(raw: &mut Raw, name: &str) -> Result<PolicyCommand, CliError> {
    let [policy, pattern, definition] = raw.positionals(name, ["NAME", "PATTERN", "DEFINITION"])?;
    match serde_json::from_str::<serde_json::Value>(&definition) {
        Ok(serde_json::Value::Object(_)) => {}
        _ => {
            return Err(CliError::Usage(format!(
                "{name}: DEFINITION must be a JSON object, e.g. '{{\"max-length\":10}}'"
            )))
        }
    }
    let priority = match raw.value("priority")? {
        None => 0,
        Some(p) => p
            .parse::<i64>()
            .map_err(|_| CliError::Usage(format!("{name}: --priority {p:?} is not an integer")))?,
    };
    let apply_to = raw.value("apply-to")?.unwrap_or_else(|| "all".into());
    // The server's own rule, so the CLI takes what a definitions import takes
    // (RabbitMQ 3.12's classic_queues, quorum_queues, streams too).
    if let Err(e) = relaymq::broker::policy::ApplyTo::parse(&apply_to) {
        return Err(CliError::Usage(format!("{name}: --apply-to: {}", e.text)));
    }
    Ok(PolicyCommand::Set {
        name: policy,
        pattern,
        definition,
        priority,
        apply_to,
    })
}

fn list_kind(what: &str) -> Result<ListKind, CliError> {
    Ok(match what {
        "vhosts" => ListKind::Vhosts,
        "exchanges" => ListKind::Exchanges,
        "queues" => ListKind::Queues,
        "bindings" => ListKind::Bindings,
        "consumers" => ListKind::Consumers,
        "connections" => ListKind::Connections,
        "users" => ListKind::Users,
        "permissions" => ListKind::Permissions,
        "policies" => ListKind::Policies,
        "vhost-limits" => ListKind::VhostLimits,
        "user-limits" => ListKind::UserLimits,
        "parameters" => ListKind::Parameters,
        "global-parameters" => ListKind::GlobalParameters,
        "operator-policies" => ListKind::OperatorPolicies,
        "shovels" => ListKind::Shovels,
        "federation-links" => ListKind::FederationLinks,
        other => {
            return Err(CliError::Usage(format!(
                "cannot list '{other}': use vhosts, exchanges, queues, bindings, consumers, \
                 connections, users, permissions, policies, vhost-limits, user-limits, \
                 parameters, global-parameters, operator-policies, shovels or federation-links"
            )))
        }
    })
}

/// Builds a field table from `K=V` / `K:=JSON` arguments (a later key wins).
///
/// # Errors
/// [`CliError::Usage`] for an argument that does not parse.
pub fn table(args: Vec<String>) -> Result<FieldTable, CliError> {
    let mut t = FieldTable::new();
    for a in args {
        let (k, v) = parse_kv(&a)?;
        t.insert(k, v);
    }
    Ok(t)
}

/// Parses one `K=V` or `K:=JSON` argument: in `K=V` a decimal integer (fitting in i64)
/// is an integer, `true`/`false` a boolean, anything else a string; `K:=JSON` takes any
/// JSON value.
///
/// # Errors
/// [`CliError::Usage`] without `=`, with an empty key, or with invalid JSON.
pub fn parse_kv(arg: &str) -> Result<(String, FieldValue), CliError> {
    let Some(eq) = arg.find('=') else {
        return Err(CliError::Usage(format!("'{arg}' is not K=V")));
    };
    let (key, value) = (&arg[..eq], &arg[eq + 1..]);
    if let Some(key) = key.strip_suffix(':') {
        if key.is_empty() {
            return Err(CliError::Usage(format!("'{arg}' has an empty key")));
        }
        let json: serde_json::Value = serde_json::from_str(value)
            .map_err(|e| CliError::Usage(format!("'{arg}': invalid JSON: {e}")))?;
        return Ok((key.to_string(), FieldValue::from_json(&json)));
    }
    if key.is_empty() {
        return Err(CliError::Usage(format!("'{arg}' has an empty key")));
    }
    Ok((key.to_string(), scalar(value)))
}

/// A `K=V` value: integer, boolean or string.
fn scalar(v: &str) -> FieldValue {
    let digits = v.strip_prefix('-').unwrap_or(v);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(i) = v.parse::<i64>() {
            return FieldValue::I64(i);
        }
    }
    match v {
        "true" => FieldValue::Bool(true),
        "false" => FieldValue::Bool(false),
        _ => FieldValue::string(v),
    }
}

/// Sets one message property from `NAME=VALUE`.
///
/// # Errors
/// [`CliError::Usage`] for an unknown name or a value that does not fit the property
/// (timestamp: seconds as u64; priority: 0–255; delivery_mode: 1 or 2).
pub fn set_property(p: &mut BasicProperties, arg: &str) -> Result<(), CliError> {
    let Some((name, value)) = arg.split_once('=') else {
        return Err(CliError::Usage(format!(
            "--property '{arg}' is not NAME=VALUE"
        )));
    };
    let text = || Some(value.to_string());
    let bad = |what: &str| CliError::Usage(format!("--property {name}: '{value}' is not {what}"));
    match name {
        "content_type" => p.content_type = text(),
        "content_encoding" => p.content_encoding = text(),
        "correlation_id" => p.correlation_id = text(),
        "reply_to" => p.reply_to = text(),
        "expiration" => p.expiration = text(),
        "message_id" => p.message_id = text(),
        "type" => p.kind = text(),
        "user_id" => p.user_id = text(),
        "app_id" => p.app_id = text(),
        "timestamp" => {
            p.timestamp = Some(value.parse().map_err(|_| bad("seconds since the epoch"))?)
        }
        "priority" => p.priority = Some(value.parse().map_err(|_| bad("an integer 0-255"))?),
        "delivery_mode" => match value {
            "1" | "2" => p.delivery_mode = value.parse().ok(),
            _ => return Err(bad("1 (transient) or 2 (persistent)")),
        },
        other => {
            return Err(CliError::Usage(format!(
                "unknown property '{other}' (known: content_type, content_encoding, \
                 correlation_id, reply_to, expiration, message_id, timestamp, type, user_id, \
                 app_id, priority, delivery_mode)"
            )))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Invocation, CliError> {
        parse(args.iter().map(OsString::from), |_| None)
    }

    fn cmd(args: &[&str]) -> Command {
        match run(args) {
            Ok(Invocation::Run(_, c)) => c,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn usage_error(args: &[&str]) -> String {
        match run(args) {
            Err(CliError::Usage(m)) => m,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn limit_and_parameter_commands_mirror_rabbitmqctl() {
        // A negative limit is a value, and a VALUE that is not JSON goes as a JSON string
        // for the server to refuse with the management API's text.
        assert_eq!(
            cmd(&["vhost-limit", "set", "max-queues", "-1"]),
            Command::VhostLimit(ValueCommand::Set {
                name: "max-queues".into(),
                value: "-1".into(),
            })
        );
        assert_eq!(
            cmd(&["user-limit", "set", "app", "max-channels", "ten"]),
            Command::UserLimit {
                user: "app".into(),
                command: ValueCommand::Set {
                    name: "max-channels".into(),
                    value: "\"ten\"".into(),
                },
            }
        );
        assert_eq!(
            cmd(&["user-limit", "clear", "app", "all"]),
            Command::UserLimit {
                user: "app".into(),
                command: ValueCommand::Clear("all".into()),
            }
        );
        assert_eq!(
            cmd(&["parameter", "set", "shovel", "s", "not json"]),
            Command::Parameter {
                component: "shovel".into(),
                command: ValueCommand::Set {
                    name: "s".into(),
                    value: "not json".into(),
                },
            }
        );
        assert_eq!(
            cmd(&["global-parameter", "clear", "x"]),
            Command::GlobalParameter(ValueCommand::Clear("x".into()))
        );
        assert_eq!(
            cmd(&["set", "cluster-name", "east"]),
            Command::SetClusterName("east".into())
        );
        for (words, kind) in [
            (["vhost-limit", "list"], ListKind::VhostLimits),
            (["user-limit", "list"], ListKind::UserLimits),
            (["parameter", "list"], ListKind::Parameters),
            (["global-parameter", "list"], ListKind::GlobalParameters),
            (["operator-policy", "list"], ListKind::OperatorPolicies),
        ] {
            assert_eq!(cmd(&words), Command::List { kind, json: false });
        }
        assert_eq!(
            cmd(&["list", "operator-policies", "--json"]),
            Command::List {
                kind: ListKind::OperatorPolicies,
                json: true,
            }
        );
        assert!(matches!(
            cmd(&[
                "operator-policy",
                "set",
                "p",
                ".*",
                "{}",
                "--priority",
                "-2"
            ]),
            Command::OperatorPolicy(PolicyCommand::Set { priority: -2, .. })
        ));
        assert!(usage_error(&["operator-policy", "set", "p", ".*", "[1]"]).contains("JSON object"));
        assert!(usage_error(&["vhost-limit", "set", "max-queues"]).contains("VALUE"));
        assert!(usage_error(&["vhost-limit", "set", "-x", "1"]).contains("unknown option -x"));
    }

    #[test]
    fn shovel_commands_are_the_shovel_parameter_and_its_status_list() {
        let def = r#"{"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://","dest-queue":"b"}"#;
        // The vhost is the global option, wherever it is given; the value goes as given
        // (the server validates it, with the API's texts).
        match run(&["shovel", "set", "s", def, "--vhost", "v1"]) {
            Ok(Invocation::Run(global, command)) => {
                assert_eq!(global.vhost, "v1");
                assert_eq!(
                    command,
                    Command::Parameter {
                        component: "shovel".into(),
                        command: ValueCommand::Set {
                            name: "s".into(),
                            value: def.into(),
                        },
                    }
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            cmd(&["shovel", "set", "s", "not json"]),
            Command::Parameter {
                component: "shovel".into(),
                command: ValueCommand::Set {
                    name: "s".into(),
                    value: "not json".into(),
                },
            }
        );
        assert_eq!(
            cmd(&["shovel", "clear", "s"]),
            Command::Parameter {
                component: "shovel".into(),
                command: ValueCommand::Clear("s".into()),
            }
        );
        assert_eq!(
            cmd(&["shovel", "list"]),
            Command::ListShovels {
                vhost: None,
                json: false,
            }
        );
        for words in [
            &["shovel", "list", "--json"][..],
            &["list", "shovels", "--json"],
        ] {
            assert_eq!(
                cmd(words),
                Command::ListShovels {
                    vhost: None,
                    json: true,
                }
            );
        }
        // `--vhost` on the command line narrows the list; RELAYMQ_VHOST only picks the
        // vhost the connection opens.
        assert_eq!(
            cmd(&["--vhost", "v1", "shovel", "list"]),
            Command::ListShovels {
                vhost: Some("v1".into()),
                json: false,
            }
        );
        let env = |k: &str| (k == "RELAYMQ_VHOST").then(|| "v2".to_string());
        match parse(["shovel", "list"].map(OsString::from), env) {
            Ok(Invocation::Run(global, command)) => {
                assert_eq!(global.vhost, "v2");
                assert_eq!(
                    command,
                    Command::ListShovels {
                        vhost: None,
                        json: false,
                    }
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(usage_error(&["shovel", "set", "s"]).contains("JSON"));
        assert!(usage_error(&["shovel", "clear"]).contains("NAME"));
        assert!(usage_error(&["shovel", "list", "x"]).contains("unexpected argument 'x'"));
        assert!(usage_error(&["shovel"]).contains("set, clear or list"));
        assert!(usage_error(&["shovel", "restart", "s"]).contains("unknown command"));
        assert!(usage_error(&["list", "nope"]).contains("shovels"));
    }

    #[test]
    fn policy_commands_mirror_rabbitmqctl() {
        assert_eq!(
            cmd(&[
                "policy",
                "set",
                "cap",
                "^q\\.",
                r#"{"max-length":1}"#,
                "--priority",
                "-2",
                "--apply-to",
                "queues",
            ]),
            Command::Policy(PolicyCommand::Set {
                name: "cap".into(),
                pattern: "^q\\.".into(),
                definition: r#"{"max-length":1}"#.into(),
                priority: -2,
                apply_to: "queues".into(),
            })
        );
        match cmd(&["policy", "set", "p", ".*", "{\"expires\":5}"]) {
            Command::Policy(PolicyCommand::Set {
                priority, apply_to, ..
            }) => assert_eq!((priority, apply_to.as_str()), (0, "all")),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            cmd(&["policy", "clear", "cap"]),
            Command::Policy(PolicyCommand::Clear("cap".into()))
        );
        assert_eq!(
            cmd(&["policy", "list", "--json"]),
            Command::List {
                kind: ListKind::Policies,
                json: true
            }
        );
        assert!(usage_error(&["policy", "set", "p", ".*", "[1]"]).contains("JSON object"));
        assert!(
            usage_error(&["policy", "set", "p", ".*", "{}", "--priority", "x"])
                .contains("--priority")
        );
        assert!(
            usage_error(&["policy", "set", "p", ".*", "{}", "--apply-to", "tables"])
                .contains("--apply-to")
        );
        for what in ["classic_queues", "quorum_queues", "streams"] {
            match cmd(&["policy", "set", "p", ".*", "{}", "--apply-to", what]) {
                Command::Policy(PolicyCommand::Set { apply_to, .. }) => assert_eq!(apply_to, what),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn kv_values_are_typed() {
        assert_eq!(parse_kv("n=10").unwrap(), ("n".into(), FieldValue::I64(10)));
        assert_eq!(parse_kv("n=-3").unwrap().1, FieldValue::I64(-3));
        assert_eq!(parse_kv("b=true").unwrap().1, FieldValue::Bool(true));
        assert_eq!(parse_kv("b=false").unwrap().1, FieldValue::Bool(false));
        assert_eq!(parse_kv("s=abc").unwrap().1, FieldValue::string("abc"));
        assert_eq!(parse_kv("s=1.5").unwrap().1, FieldValue::string("1.5"));
        assert_eq!(parse_kv("s=").unwrap().1, FieldValue::string(""));
        assert_eq!(parse_kv("s=-").unwrap().1, FieldValue::string("-"));
        assert_eq!(
            parse_kv("s=a=b").unwrap(),
            ("s".into(), FieldValue::string("a=b"))
        );
        let huge = "99999999999999999999";
        assert_eq!(
            parse_kv(&format!("h={huge}")).unwrap().1,
            FieldValue::string(huge)
        );
    }

    #[test]
    fn kv_json_values() {
        assert_eq!(
            parse_kv(r#"n:="10""#).unwrap(),
            ("n".into(), FieldValue::string("10"))
        );
        assert_eq!(parse_kv("n:=10").unwrap().1, FieldValue::I64(10));
        assert_eq!(parse_kv("f:=1.5").unwrap().1, FieldValue::F64(1.5));
        assert_eq!(parse_kv("v:=null").unwrap().1, FieldValue::Void);
        assert_eq!(
            parse_kv(r#"a:=[1,"x"]"#).unwrap().1,
            FieldValue::Array(vec![FieldValue::I64(1), FieldValue::string("x")])
        );
        assert!(parse_kv("a:=[1,").is_err());
    }

    #[test]
    fn bad_kv_is_a_usage_error() {
        assert!(matches!(parse_kv("novalue"), Err(CliError::Usage(_))));
        assert!(matches!(parse_kv("=v"), Err(CliError::Usage(_))));
        assert!(matches!(parse_kv(":=1"), Err(CliError::Usage(_))));
        assert!(usage_error(&["bind", "q", "x", "--arg", "oops"]).contains("not K=V"));
    }

    #[test]
    fn properties_parse() {
        let mut p = BasicProperties::default();
        for a in [
            "content_type=text/plain",
            "correlation_id=c-1",
            "type=order",
            "timestamp=1700000000",
            "priority=5",
            "delivery_mode=2",
            "expiration=60000",
        ] {
            set_property(&mut p, a).unwrap();
        }
        assert_eq!(p.content_type.as_deref(), Some("text/plain"));
        assert_eq!(p.kind.as_deref(), Some("order"));
        assert_eq!(p.timestamp, Some(1_700_000_000));
        assert_eq!((p.priority, p.delivery_mode), (Some(5), Some(2)));
        assert_eq!(p.expiration.as_deref(), Some("60000"));
        assert!(set_property(&mut p, "priority=300").is_err());
        assert!(set_property(&mut p, "delivery_mode=3").is_err());
        assert!(set_property(&mut p, "colour=red").is_err());
        assert!(set_property(&mut p, "content_type").is_err());
    }

    #[test]
    fn global_options_and_environment() {
        let env = |k: &str| (k == "RELAYMQ_ADDR").then(|| "10.0.0.1:1".to_string());
        let args = ["--vhost", "v1", "status"].map(OsString::from);
        match parse(args, env).unwrap() {
            Invocation::Run(g, Command::Status { json: false }) => {
                assert_eq!((g.addr.as_str(), g.vhost.as_str()), ("10.0.0.1:1", "v1"));
                assert_eq!((g.user.as_str(), g.password.as_str()), ("guest", "guest"));
            }
            other => panic!("{other:?}"),
        }
        match run(&["--addr=h:1", "list", "queues", "--user", "u"]).unwrap() {
            Invocation::Run(g, Command::List { kind, json }) => {
                assert_eq!((g.addr.as_str(), g.user.as_str()), ("h:1", "u"));
                assert_eq!((kind, json), (ListKind::Queues, false));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(run(&["publish", "--help"]).unwrap(), Invocation::Help);
    }

    #[test]
    fn set_commands_parse() {
        assert_eq!(
            cmd(&["set", "memory-high-watermark", "0.4"]),
            Command::SetMemoryHighWatermark(MemoryWatermark::Relative(0.4))
        );
        assert_eq!(
            cmd(&["set", "memory-high-watermark", "512MiB"]),
            Command::SetMemoryHighWatermark(MemoryWatermark::Absolute(512 << 20))
        );
        assert_eq!(
            cmd(&["set", "disk-free-limit", "2GiB"]),
            Command::SetDiskFreeLimit(2 << 30)
        );
        assert!(usage_error(&["set", "memory-high-watermark", "1.5"]).contains("from 0 to 1.0"));
        let e = usage_error(&["set", "memory-high-watermark", "2"]);
        assert!(
            e.contains("2 bytes") && e.contains("0.4") && e.contains("1GiB"),
            "{e}"
        );
        assert_eq!(
            cmd(&["set", "disk-free-limit", "2GB"]),
            Command::SetDiskFreeLimit(2_000_000_000)
        );
        assert!(usage_error(&["set", "disk-free-limit", "1.5GB"]).contains("not a size"));
        assert!(usage_error(&["set", "colour", "red"]).contains("cannot set"));
        assert!(usage_error(&["set", "disk-free-limit"]).contains("needs VALUE"));
    }

    #[test]
    fn tls_options() {
        match run(&["--tls", "--tls-ca", "ca.pem", "status"]).unwrap() {
            Invocation::Run(g, _) => {
                assert_eq!(g.addr, TLS_ADDR_DEFAULT);
                let t = g.tls.expect("tls on");
                assert_eq!(t.ca_file, std::path::PathBuf::from("ca.pem"));
                assert_eq!((t.cert_file, t.key_file, t.server_name), (None, None, None));
            }
            other => panic!("{other:?}"),
        }
        let args = [
            "--addr=h:1",
            "--tls",
            "--tls-ca=ca",
            "--tls-cert=c",
            "--tls-key=k",
            "--tls-server-name=broker",
            "status",
        ];
        match run(&args).unwrap() {
            Invocation::Run(g, _) => {
                assert_eq!(g.addr, "h:1");
                let t = g.tls.expect("tls on");
                assert_eq!(t.cert_file.as_deref(), Some(std::path::Path::new("c")));
                assert_eq!(t.key_file.as_deref(), Some(std::path::Path::new("k")));
                assert_eq!(t.server_name.as_deref(), Some("broker"));
            }
            other => panic!("{other:?}"),
        }
        match run(&["status"]).unwrap() {
            Invocation::Run(g, _) => assert_eq!(g.tls, None),
            other => panic!("{other:?}"),
        }
        for bad in [
            &["--tls", "status"][..],
            &["--tls-ca", "ca", "status"],
            &["--tls", "--tls-ca", "ca", "--tls-cert", "c", "status"],
        ] {
            assert!(matches!(run(bad), Err(CliError::Usage(_))), "{bad:?}");
        }
    }

    #[test]
    fn commands_parse() {
        match cmd(&[
            "declare",
            "exchange",
            "x",
            "--type",
            "topic",
            "--durable",
            "--arg",
            "alternate-exchange=ae",
        ]) {
            Command::DeclareExchange {
                name,
                kind,
                options,
            } => {
                assert_eq!((name.as_str(), kind.as_str()), ("x", "topic"));
                assert!(options.durable && !options.auto_delete);
                assert_eq!(
                    options.arguments["alternate-exchange"],
                    FieldValue::string("ae")
                );
            }
            other => panic!("{other:?}"),
        }
        match cmd(&[
            "declare",
            "queue",
            "",
            "--exclusive",
            "--arg",
            "x-max-length=10",
        ]) {
            Command::DeclareQueue { name, options } => {
                assert!(name.is_empty() && options.exclusive);
                assert_eq!(options.arguments["x-max-length"], FieldValue::I64(10));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            cmd(&["delete", "queue", "q", "--if-empty"]),
            Command::DeleteQueue {
                name: "q".into(),
                if_unused: false,
                if_empty: true
            }
        );
        assert_eq!(
            cmd(&["purge", "queue", "q"]),
            Command::PurgeQueue("q".into())
        );
        match cmd(&["unbind-exchange", "d", "s", "--key", "k"]) {
            Command::Binding {
                exchange_to_exchange: true,
                bind: false,
                destination,
                key,
                ..
            } => assert_eq!((destination.as_str(), key.as_str()), ("d", "k")),
            other => panic!("{other:?}"),
        }
        match cmd(&["consume", "q", "--count", "3", "--timeout", "1.5"]) {
            Command::Consume(c) => {
                assert_eq!((c.count, c.prefetch), (Some(3), None));
                assert_eq!(c.timeout, Some(Duration::from_millis(1500)));
            }
            other => panic!("{other:?}"),
        }
        match cmd(&["get", "q", "--requeue"]) {
            Command::Get(g) => assert_eq!((g.count, g.requeue, g.reject), (1, true, false)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn publish_parses_body_headers_and_properties() {
        match cmd(&[
            "publish",
            "",
            "q",
            "hi",
            "--persistent",
            "--header",
            "n=1",
            "--property",
            "app_id=cli",
            "--mandatory",
        ]) {
            Command::Publish(p) => {
                assert_eq!(p.body.as_deref(), Some("hi"));
                assert!(p.mandatory && !p.confirm && !p.lines);
                assert_eq!(p.properties.delivery_mode, Some(2));
                assert_eq!(p.properties.app_id.as_deref(), Some("cli"));
                assert_eq!(p.properties.headers.unwrap()["n"], FieldValue::I64(1));
            }
            other => panic!("{other:?}"),
        }
        match cmd(&["publish", "x", "k", "--lines"]) {
            Command::Publish(p) => assert!(p.lines && p.body.is_none()),
            other => panic!("{other:?}"),
        }
        assert!(usage_error(&["publish", "x", "k", "b", "--lines"]).contains("--lines"));
        assert!(usage_error(&["publish", "x"]).contains("ROUTING_KEY"));
        assert!(usage_error(&["publish", "x", "k", "b", "extra"]).contains("extra"));
    }

    #[test]
    fn usage_errors() {
        assert!(usage_error(&[]).contains("no command"));
        assert!(usage_error(&["frobnicate"]).contains("unknown command"));
        assert!(usage_error(&["declare", "exchange", "x"]).contains("--type"));
        assert!(usage_error(&["declare", "widget", "x"]).contains("unknown command"));
        assert!(usage_error(&["list", "queues", "--durable"]).contains("not valid for 'list'"));
        assert!(usage_error(&["list", "widgets"]).contains("cannot list"));
        assert!(usage_error(&["status", "--bogus"]).contains("unknown option"));
        assert!(usage_error(&["consume", "q", "--count", "x"]).contains("not a valid number"));
        assert!(usage_error(&["consume", "q", "--count", "0"]).contains("at least 1"));
        assert!(usage_error(&["consume", "q", "--timeout", "-1"]).contains("positive"));
        assert!(usage_error(&["get"]).contains("QUEUE"));
        assert!(usage_error(&["get", "q", "--requeue", "--reject"]).contains("cannot be combined"));
        assert!(usage_error(&["status", "--json=yes"]).contains("json"));
    }

    #[test]
    fn close_export_import_parse() {
        assert_eq!(
            cmd(&["close", "connection", "17", "--reason", "bye"]),
            Command::CloseConnection {
                id: 17,
                reason: "bye".into()
            }
        );
        assert_eq!(
            cmd(&["close", "connection", "3"]),
            Command::CloseConnection {
                id: 3,
                reason: String::new()
            }
        );
        assert_eq!(
            cmd(&["export", "definitions"]),
            Command::ExportDefinitions(None)
        );
        assert_eq!(
            cmd(&["export", "definitions", "-"]),
            Command::ExportDefinitions(None)
        );
        assert_eq!(
            cmd(&["export", "definitions", "d.json"]),
            Command::ExportDefinitions(Some("d.json".into()))
        );
        assert_eq!(
            cmd(&["import", "definitions", "d.json"]),
            Command::ImportDefinitions("d.json".into())
        );
        assert!(usage_error(&["close", "connection", "abc"]).contains("must be a number"));
        assert!(usage_error(&["close", "channel", "1"]).contains("close connection ID"));
        assert!(usage_error(&["import", "definitions"]).contains("FILE"));
        assert!(usage_error(&["export", "queues"]).contains("export definitions"));
        assert!(
            usage_error(&["export", "definitions", "f", "--reason", "x"])
                .contains("not valid for 'export'")
        );
    }
}
