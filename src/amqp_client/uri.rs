//! AMQP URIs for this client: the parsing is [`crate::types::amqp_uri`] (RabbitMQ's
//! `amqp_uri`), shared with the broker's checks of shovel and federation definitions;
//! this adds the [`ConnectOptions`] a URI stands for.

pub use crate::types::amqp_uri::{
    percent_decode, percent_encode, redact, AmqpUri, AMQPS_PORT_DEFAULT, AMQP_PORT_DEFAULT,
};

use super::connection::ConnectOptions;
use crate::client::TlsOptions;
use std::time::Duration;

impl AmqpUri {
    /// Connect options for this URI: its address, user, password, vhost, heartbeat and
    /// timeout, named `connection_name`; for `amqps`, TLS with the URI's files, else
    /// with `tls_defaults` (the server's own CA and certificate).
    ///
    /// # Errors
    /// An `amqps` URI without a CA file while `tls_defaults` has none.
    pub fn connect_options(
        &self,
        connection_name: &str,
        tls_defaults: Option<&TlsOptions>,
    ) -> Result<ConnectOptions, String> {
        let mut o = ConnectOptions::new(self.addr());
        o.user = self.user.clone();
        o.password = self.password.clone();
        o.vhost = self.vhost.clone();
        o.connection_name = connection_name.to_string();
        if let Some(hb) = self.heartbeat {
            o.heartbeat = hb;
        }
        if let Some(ms) = self.connection_timeout_ms {
            o.connect_timeout = Duration::from_millis(ms.max(1));
        }
        if self.tls {
            let mut t = match (&self.ca_file, tls_defaults) {
                (Some(ca), _) => TlsOptions::new(ca.clone()),
                (None, Some(d)) => d.clone(),
                (None, None) => {
                    return Err(
                        "amqps:// needs a CA to check the server's certificate: give \
                         ?cacertfile=PATH, or start RelayMQ with --tls-client-ca (its TLS \
                         settings are then the default)"
                            .into(),
                    )
                }
            };
            if self.cert_file.is_some() || self.key_file.is_some() {
                t.cert_file = self.cert_file.clone();
                t.key_file = self.key_file.clone();
            }
            if let Some(n) = &self.server_name {
                t.server_name = Some(n.clone());
            }
            o.tls = Some(t);
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn amqps_needs_a_ca() {
        let u = AmqpUri::parse("amqps://h").unwrap();
        assert!(u
            .connect_options("n", None)
            .unwrap_err()
            .contains("cacertfile"));
        let o = u
            .connect_options("n", Some(&TlsOptions::new("/ca.pem")))
            .unwrap();
        assert_eq!(o.tls.unwrap().ca_file, PathBuf::from("/ca.pem"));
        let u = AmqpUri::parse("amqps://h?cacertfile=%2Fx.pem&server_name_indication=n").unwrap();
        let t = u.connect_options("n", None).unwrap().tls.unwrap();
        assert_eq!(
            (t.ca_file, t.server_name),
            (PathBuf::from("/x.pem"), Some("n".into()))
        );
    }
}
