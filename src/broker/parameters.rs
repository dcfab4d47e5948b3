//! Runtime parameters and global parameters (RabbitMQ's `rabbit_runtime_parameters`,
//! `rabbitmqctl set_parameter` / `set_global_parameter`; the management API's
//! `/api/parameters` and `/api/global-parameters`).
//!
//! A runtime parameter is (vhost, component, name) → a JSON value. What RelayMQ does with
//! each component:
//!
//! | component | what happens |
//! |---|---|
//! | `vhost-limits` (name `limits`) | the vhost's limits ([`crate::broker::limits`]): the same limits `/api/vhost-limits` reads and writes, enforced |
//! | `operator_policy` | the vhost's operator policies ([`crate::broker::policy::operator`]), enforced |
//! | `policy` | refused, as RabbitMQ: "policies may not be set using this method" |
//! | `shovel` | validated as RabbitMQ validates it ([`crate::broker::shovel_definition`]), stored, and run by the link runtime: a dynamic shovel |
//! | `federation-upstream`, `federation-upstream-set` | validated as RabbitMQ validates them ([`crate::broker::federation_upstream`]), stored, and used by exchange federation |
//! | [`STORED_COMPONENTS`] (`federation`) | stored in `meta.db`, listed and exported, **not acted on**: a warning "stored but not acted on by RelayMQ" is logged |
//! | anything else | refused, as RabbitMQ refuses a component no plugin registered: "component X not found" |
//!
//! A global parameter is a name → a JSON value. `cluster_name` is the cluster's name
//! ([`Broker::cluster_name`]); every other one is stored, listed and exported, and not acted
//! on. Everything is committed to `meta.db` before it takes effect.

use crate::broker::federation_upstream::{
    self as upstream, Upstream, UPSTREAM_COMPONENT, UPSTREAM_SET_COMPONENT,
};
use crate::broker::limits::{self, VHOST_LIMITS, VHOST_LIMITS_COMPONENT, VHOST_LIMITS_TERM};
use crate::broker::policy::operator;
use crate::broker::policy::{Policy, PolicyDef};
use crate::broker::shovel_definition::{ShovelDef, SHOVEL_COMPONENT};
use crate::broker::vhost::VirtualHost;
use crate::broker::Broker;
use crate::error::BrokerError;
use crate::storage::meta::Definitions;
use crate::storage::meta_parameters::{GlobalParameterRow, ParameterRow};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The runtime parameters a vhost stores, by (component, name).
pub type ParameterMap = BTreeMap<(String, String), Value>;

/// Largest value of a runtime or global parameter, as JSON text, in bytes.
pub const PARAMETER_VALUE_BYTES_MAX: usize = 64 * 1024;

/// Runtime parameters one vhost may store at most (all stored components together;
/// vhost limits and operator policies have their own bounds).
pub const PARAMETERS_PER_VHOST_MAX: usize = 1024;

/// Global parameters the broker may store at most.
pub const GLOBAL_PARAMETERS_MAX: usize = 1024;

/// Longest component or parameter name, in bytes.
pub const PARAMETER_NAME_BYTES_MAX: usize = 255;

/// Components RabbitMQ's plugins register that RelayMQ stores but does not act on
/// (`rabbit_federation_parameters`' `federation`, which holds `local-nodename`).
pub const STORED_COMPONENTS: [&str; 1] = ["federation"];

/// Components RelayMQ acts on beyond limits and operator policies: dynamic shovels and
/// exchange federation.
pub const ACTED_ON_COMPONENTS: [&str; 3] =
    [SHOVEL_COMPONENT, UPSTREAM_COMPONENT, UPSTREAM_SET_COMPONENT];

/// Checks the value of a component RelayMQ acts on beyond limits and operator policies
/// (`shovel`, `federation-upstream`, `federation-upstream-set`): `None` for any other
/// component.
///
/// # Errors
/// The validation's text, in RabbitMQ's words.
pub fn check_acted_on(component: &str, name: &str, value: &Value) -> Option<Result<(), String>> {
    match component {
        SHOVEL_COMPONENT => Some(ShovelDef::parse(name, value).map(|_| ())),
        UPSTREAM_COMPONENT => Some(Upstream::parse(name, value, None).map(|_| ())),
        UPSTREAM_SET_COMPONENT => Some(upstream::check_set(name, value)),
        _ => None,
    }
}

/// The component of operator policies (`rabbit_policy`).
pub const OPERATOR_POLICY_COMPONENT: &str = "operator_policy";

/// The component of user policies, refused here (`rabbit_runtime_parameters:set/5`).
pub const POLICY_COMPONENT: &str = "policy";

/// The global parameter holding the cluster's name (`rabbit_nodes:cluster_name/0`).
pub const CLUSTER_NAME: &str = "cluster_name";

/// A runtime parameter as RabbitMQ shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeParameter {
    /// Its vhost.
    pub vhost: String,
    /// Its component.
    pub component: String,
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: Value,
}

impl RuntimeParameter {
    /// `{"vhost", "component", "name", "value"}` (`rabbit_mgmt_format:parameter/1`, the
    /// definitions file's `parameters` elements).
    pub fn to_json(&self) -> Value {
        json!({
            "vhost": self.vhost,
            "component": self.component,
            "name": self.name,
            "value": self.value,
        })
    }
}

/// An operator policy as a runtime parameter's value: `pattern`, `definition`,
/// `priority`, `apply-to` (`rabbit_policy:set/8`).
pub fn operator_policy_value(def: &PolicyDef) -> Value {
    json!({
        "pattern": def.pattern,
        "definition": Value::Object(def.definition.clone()),
        "priority": def.priority,
        "apply-to": def.apply_to,
    })
}

/// The operator policy `name` of `vhost` a runtime parameter's value describes.
///
/// # Errors
/// 406 PRECONDITION_FAILED naming a missing or mistyped field.
pub fn operator_policy_from_value(
    vhost: &str,
    name: &str,
    value: &Value,
) -> Result<PolicyDef, BrokerError> {
    let mut fields = value
        .as_object()
        .cloned()
        .ok_or_else(|| BrokerError::precondition("Validation failed: value must be an object"))?;
    fields.insert("vhost".into(), json!(vhost));
    fields.insert("name".into(), json!(name));
    PolicyDef::from_rabbitmq_json(&Value::Object(fields))
}

/// 406 for a component or name that is empty or longer than [`PARAMETER_NAME_BYTES_MAX`].
fn check_name(what: &str, name: &str) -> Result<(), BrokerError> {
    if name.is_empty() || name.len() > PARAMETER_NAME_BYTES_MAX {
        return Err(BrokerError::precondition(format!(
            "invalid {what} '{name}': 1 to {PARAMETER_NAME_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// The value as JSON text, or 406 past [`PARAMETER_VALUE_BYTES_MAX`].
fn value_text(value: &Value) -> Result<String, BrokerError> {
    let text = value.to_string();
    if text.len() > PARAMETER_VALUE_BYTES_MAX {
        return Err(BrokerError::precondition(format!(
            "parameter value of {} bytes exceeds the limit of {PARAMETER_VALUE_BYTES_MAX} bytes",
            text.len()
        )));
    }
    Ok(text)
}

/// RabbitMQ's refusal of a component no plugin registered
/// (`rabbit_runtime_parameters:component_not_found/1`, formatted by `format_error/1`).
fn component_not_found(component: &str) -> BrokerError {
    BrokerError::precondition(format!(
        "Validation failed\n\ncomponent {component} not found\n"
    ))
}

impl VirtualHost {
    fn parameter_map(&self) -> std::sync::MutexGuard<'_, ParameterMap> {
        self.parameters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every runtime parameter the vhost has: its limits (component `vhost-limits`), its
    /// operator policies and the stored ones, sorted by (component, name).
    pub fn runtime_parameters(&self) -> Vec<RuntimeParameter> {
        let vhost = self.name.to_string();
        let mut all = Vec::new();
        let own = self.own_limits();
        if !own.is_empty() {
            all.push(RuntimeParameter {
                vhost: vhost.clone(),
                component: VHOST_LIMITS_COMPONENT.into(),
                name: VHOST_LIMITS_TERM.into(),
                value: limits::to_json(&own),
            });
        }
        for p in self.operator_policies() {
            all.push(RuntimeParameter {
                vhost: vhost.clone(),
                component: OPERATOR_POLICY_COMPONENT.into(),
                name: p.def.name.clone(),
                value: operator_policy_value(&p.def),
            });
        }
        for ((component, name), value) in self.parameter_map().iter() {
            all.push(RuntimeParameter {
                vhost: vhost.clone(),
                component: component.clone(),
                name: name.clone(),
                value: value.clone(),
            });
        }
        all.sort_by(|a, b| (&a.component, &a.name).cmp(&(&b.component, &b.name)));
        all
    }

    /// Stores a parameter of a [`STORED_COMPONENTS`] component; returns whether it is new.
    fn store_parameter(
        &self,
        component: &str,
        name: &str,
        value: Value,
    ) -> Result<bool, BrokerError> {
        let text = value_text(&value)?;
        let _changes = self.changes();
        let key = (component.to_string(), name.to_string());
        let created = !self.parameter_map().contains_key(&key);
        if created && self.parameter_map().len() >= PARAMETERS_PER_VHOST_MAX {
            return Err(BrokerError::precondition(format!(
                "vhost '{}' has {PARAMETERS_PER_VHOST_MAX} runtime parameters, the most allowed",
                self.name
            )));
        }
        let row = ParameterRow {
            vhost: self.name.to_string(),
            component: component.to_string(),
            name: name.to_string(),
            value: text,
        };
        self.persist("runtime parameter", |m| m.put_parameter(&row))?;
        self.parameter_map().insert(key, value);
        Ok(created)
    }

    /// Installs imported parameters (already committed with the import's batch).
    pub(crate) fn install_parameters(&self, params: Vec<(String, String, Value)>) {
        let mut map = self.parameter_map();
        for (component, name, value) in params {
            map.insert((component, name), value);
        }
    }

    /// Number of stored parameters (for an import's bound).
    pub(crate) fn stored_parameter_count(&self) -> usize {
        self.parameter_map().len()
    }

    /// Whether a stored parameter of `(component, name)` exists.
    pub(crate) fn has_stored_parameter(&self, component: &str, name: &str) -> bool {
        self.parameter_map()
            .contains_key(&(component.to_string(), name.to_string()))
    }
}

impl Broker {
    /// Sets a runtime parameter for `user` ([`Broker::set_parameter`]); a shovel's local
    /// ends (URIs without a host) must name vhosts `user` may use, as RabbitMQ's shovel
    /// validation checks a direct connection's vhost against the user setting it
    /// (`rabbit_shovel_util:validate_params_user/2`): else a policymaker of one vhost
    /// could move messages in and out of any other.
    ///
    /// # Errors
    /// 406 "Validation failed … access to vhost 'V' refused for user 'U'"; else as
    /// [`Broker::set_parameter`].
    pub fn set_parameter_as(
        &self,
        user: &str,
        vhost: &str,
        component: &str,
        name: &str,
        value: Value,
    ) -> Result<bool, crate::error::BrokerError> {
        if component == SHOVEL_COMPONENT {
            let admin = self
                .users()
                .user(user)
                .is_some_and(|u| u.has_tag(crate::auth::users::TAG_ADMINISTRATOR));
            for key in ["src-uri", "dest-uri"] {
                let uris: Vec<&str> = match value.get(key) {
                    Some(Value::String(u)) => vec![u.as_str()],
                    Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                    _ => Vec::new(),
                };
                for u in uris {
                    let Ok(uri) = crate::types::amqp_uri::AmqpUri::parse(u) else {
                        continue;
                    };
                    if uri.is_local()
                        && !admin
                        && self.users().permissions(user, &uri.vhost).is_none()
                    {
                        return Err(crate::error::BrokerError::precondition(format!(
                            "Validation failed\n\naccess to vhost '{}' refused for user \
                             '{user}'\n",
                            uri.vhost
                        )));
                    }
                }
            }
        }
        self.set_parameter(vhost, component, name, value)
    }

    fn vhost_or_404(&self, vhost: &str) -> Result<Arc<VirtualHost>, BrokerError> {
        self.vhost(vhost)
            .ok_or_else(|| BrokerError::not_found(format!("no vhost '{vhost}'")))
    }

    /// Every runtime parameter of every vhost, sorted by (vhost, component, name)
    /// (`rabbit_runtime_parameters:list/0`: user policies excluded).
    pub fn parameters(&self) -> Vec<RuntimeParameter> {
        let mut vhosts = self.vhosts();
        vhosts.sort_by(|a, b| a.name.cmp(&b.name));
        vhosts.iter().flat_map(|v| v.runtime_parameters()).collect()
    }

    /// One runtime parameter, if it exists.
    pub fn parameter(&self, vhost: &str, component: &str, name: &str) -> Option<RuntimeParameter> {
        self.vhost(vhost)?
            .runtime_parameters()
            .into_iter()
            .find(|p| p.component == component && p.name == name)
    }

    /// Sets a runtime parameter (`rabbit_runtime_parameters:set/5`); returns whether it was
    /// created. `vhost-limits` replaces the vhost's limits, `operator_policy` sets an
    /// operator policy, a [`STORED_COMPONENTS`] one is stored and a warning logged.
    ///
    /// # Errors
    /// 404 NOT_FOUND for an unknown vhost; 406 PRECONDITION_FAILED with RabbitMQ's text
    /// for the `policy` component, an unknown component, a bad value (limits, operator
    /// policy), a name other than `limits` for `vhost-limits`, a value past
    /// [`PARAMETER_VALUE_BYTES_MAX`] or a vhost at [`PARAMETERS_PER_VHOST_MAX`]; 541 when
    /// `meta.db` fails.
    pub fn set_parameter(
        &self,
        vhost: &str,
        component: &str,
        name: &str,
        value: Value,
    ) -> Result<bool, BrokerError> {
        let vh = self.vhost_or_404(vhost)?;
        check_name("component", component)?;
        check_name("parameter name", name)?;
        match component {
            POLICY_COMPONENT => Err(BrokerError::precondition(
                "policies may not be set using this method",
            )),
            VHOST_LIMITS_COMPONENT => {
                if name != VHOST_LIMITS_TERM {
                    return Err(BrokerError::precondition(format!(
                        "Validation failed\n\nvhost limits are named '{VHOST_LIMITS_TERM}', not \
                         '{name}'\n"
                    )));
                }
                let object = value.as_object().ok_or_else(|| {
                    BrokerError::precondition("Validation failed\n\nlimits must be an object\n")
                })?;
                let limits = limits::validate(VHOST_LIMITS_TERM, &VHOST_LIMITS, object)?;
                let _changes = vh.changes();
                let created = vh.own_limits().is_empty();
                self.store_vhost_limits(&vh, limits)?;
                Ok(created)
            }
            OPERATOR_POLICY_COMPONENT => self
                .set_operator_policy(operator_policy_from_value(vhost, name, &value)?)
                .map(|replaced| !replaced),
            SHOVEL_COMPONENT => {
                ShovelDef::parse(name, &value).map_err(|why| {
                    BrokerError::precondition(format!("Validation failed\n\n{why}\n"))
                })?;
                let links = self.links.get();
                if let Some(why) = links.and_then(|l| l.shovel_refusal(vhost, name)) {
                    return Err(BrokerError::precondition(format!(
                        "Validation failed\n\n{why}\n"
                    )));
                }
                let created = vh.store_parameter(component, name, value.clone())?;
                if let Some(l) = links {
                    l.shovel_set(vhost, name, &value);
                }
                Ok(created)
            }
            UPSTREAM_COMPONENT | UPSTREAM_SET_COMPONENT => {
                let checked = if component == UPSTREAM_COMPONENT {
                    Upstream::parse(name, &value, None).map(|_| ())
                } else {
                    upstream::check_set(name, &value)
                };
                checked.map_err(|why| {
                    BrokerError::precondition(format!("Validation failed\n\n{why}\n"))
                })?;
                // The federation manager picks the change up at its next scan.
                vh.store_parameter(component, name, value)
            }
            c if STORED_COMPONENTS.contains(&c) => {
                let created = vh.store_parameter(component, name, value)?;
                log::warn!(
                    "runtime parameter '{name}' of component '{component}' in vhost '{vhost}' \
                     stored but not acted on by RelayMQ"
                );
                Ok(created)
            }
            _ => Err(component_not_found(component)),
        }
    }

    /// Clears a runtime parameter (`rabbit_runtime_parameters:clear/4`).
    ///
    /// # Errors
    /// 404 NOT_FOUND for an unknown vhost or a parameter that does not exist
    /// ("Parameter does not exist"); 406 for the `policy` component; 541 when `meta.db`
    /// fails.
    pub fn clear_parameter(
        &self,
        vhost: &str,
        component: &str,
        name: &str,
    ) -> Result<(), BrokerError> {
        let vh = self.vhost_or_404(vhost)?;
        let missing = || BrokerError::not_found("Parameter does not exist");
        match component {
            POLICY_COMPONENT => Err(BrokerError::precondition(
                "policies may not be cleared using this method",
            )),
            VHOST_LIMITS_COMPONENT => {
                let _changes = vh.changes();
                if name != VHOST_LIMITS_TERM || vh.own_limits().is_empty() {
                    return Err(missing());
                }
                self.store_vhost_limits(&vh, limits::LimitMap::new())
            }
            OPERATOR_POLICY_COMPONENT => vh.clear_operator_policy(name).map_err(|e| {
                if e.code == crate::error::ReplyCode::NotFound {
                    missing()
                } else {
                    e
                }
            }),
            _ => {
                let _changes = vh.changes();
                let key = (component.to_string(), name.to_string());
                if !vh.parameter_map().contains_key(&key) {
                    return Err(missing());
                }
                vh.persist("runtime parameter", |m| {
                    m.delete_parameter(vhost, component, name)
                })?;
                vh.parameter_map().remove(&key);
                if component == SHOVEL_COMPONENT {
                    if let Some(l) = self.links.get() {
                        l.shovel_cleared(vhost, name);
                    }
                }
                Ok(())
            }
        }
    }

    fn global_map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Value>> {
        self.global_parameters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Every global parameter, sorted by name (`rabbit_runtime_parameters:list_global/0`).
    pub fn global_parameters(&self) -> Vec<(String, Value)> {
        self.global_map()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// One global parameter's value, if set.
    pub fn global_parameter(&self, name: &str) -> Option<Value> {
        self.global_map().get(name).cloned()
    }

    /// Sets a global parameter (`rabbit_runtime_parameters:set_global/3`); returns whether
    /// it was created. Names other than [`CLUSTER_NAME`] are stored and not acted on (a
    /// warning is logged).
    ///
    /// # Errors
    /// 406 PRECONDITION_FAILED for a bad name, a `cluster_name` that is not a non-empty
    /// string, a value past [`PARAMETER_VALUE_BYTES_MAX`] or [`GLOBAL_PARAMETERS_MAX`]
    /// reached; 541 when `meta.db` fails.
    pub fn set_global_parameter(&self, name: &str, value: Value) -> Result<bool, BrokerError> {
        check_name("global parameter name", name)?;
        if name == CLUSTER_NAME && value.as_str().is_none_or(str::is_empty) {
            return Err(BrokerError::precondition(
                "cluster_name must be a non-empty string",
            ));
        }
        let text = value_text(&value)?;
        let mut map = self.global_map();
        let created = !map.contains_key(name);
        if created && map.len() >= GLOBAL_PARAMETERS_MAX {
            return Err(BrokerError::precondition(format!(
                "{GLOBAL_PARAMETERS_MAX} global parameters are set, the most allowed"
            )));
        }
        if let Some(d) = self.durability() {
            let row = GlobalParameterRow {
                name: name.to_string(),
                value: text,
            };
            d.meta("global parameter", |m| m.put_global_parameter(&row))?;
        }
        map.insert(name.to_string(), value);
        drop(map);
        if name != CLUSTER_NAME {
            log::warn!("global parameter '{name}' stored but not acted on by RelayMQ");
        }
        Ok(created)
    }

    /// Clears a global parameter (`rabbit_runtime_parameters:clear_global/2`).
    ///
    /// # Errors
    /// 404 NOT_FOUND "Parameter does not exist"; 541 when `meta.db` fails.
    pub fn clear_global_parameter(&self, name: &str) -> Result<(), BrokerError> {
        let mut map = self.global_map();
        if !map.contains_key(name) {
            return Err(BrokerError::not_found("Parameter does not exist"));
        }
        if let Some(d) = self.durability() {
            d.meta("global parameter", |m| m.delete_global_parameter(name))?;
        }
        map.remove(name);
        Ok(())
    }

    /// The cluster name set (`PUT /api/cluster-name`, the `cluster_name` global
    /// parameter), if any; callers default to the node's name, as
    /// `rabbit_nodes:cluster_name/0`.
    pub fn cluster_name(&self) -> Option<String> {
        self.global_parameter(CLUSTER_NAME)
            .and_then(|v| v.as_str().map(str::to_string))
    }

    /// Installs imported global parameters (already committed with the import's batch).
    pub(crate) fn install_global_parameters(&self, params: Vec<(String, Value)>) {
        self.global_map().extend(params);
    }
}

/// Restores operator policies and runtime parameters into `vhosts` and returns the global
/// parameters (recovery, before queues exist). A row that does not parse is logged and
/// skipped, as a policy's.
pub(crate) fn restore(
    vhosts: &HashMap<String, Arc<VirtualHost>>,
    d: &Definitions,
) -> BTreeMap<String, Value> {
    for row in &d.operator_policies {
        let Some(vh) = vhosts.get(&row.vhost) else {
            continue;
        };
        match PolicyDef::from_row(row)
            .map_err(|e| e.to_string())
            .and_then(|d| operator::compile(d).map_err(|e| e.text))
        {
            Ok(p) => vh.restore_operator_policy(p),
            Err(why) => log::error!(
                "operator policy '{}' in vhost '{}' not recovered: {why}",
                row.name,
                row.vhost
            ),
        }
    }
    for row in &d.parameters {
        let Some(vh) = vhosts.get(&row.vhost) else {
            continue;
        };
        match serde_json::from_str::<Value>(&row.value) {
            Ok(v) => vh.install_parameters(vec![(row.component.clone(), row.name.clone(), v)]),
            Err(e) => log::error!(
                "runtime parameter '{}' of component '{}' in vhost '{}' not recovered: {e}",
                row.name,
                row.component,
                row.vhost
            ),
        }
    }
    let mut global = BTreeMap::new();
    for row in &d.global_parameters {
        match serde_json::from_str::<Value>(&row.value) {
            Ok(v) => {
                global.insert(row.name.clone(), v);
            }
            Err(e) => log::error!("global parameter '{}' not recovered: {e}", row.name),
        }
    }
    global
}

/// Whether a policy compiled for `def` would be an operator policy RelayMQ accepts (used
/// by the import's validation).
///
/// # Errors
/// As [`operator::compile`].
pub fn check_operator_policy(def: PolicyDef) -> Result<Policy, BrokerError> {
    operator::compile(def)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::BrokerConfig;

    fn broker() -> Broker {
        Broker::new(BrokerConfig::default())
    }

    #[test]
    fn components_are_stored_refused_or_routed() {
        let b = broker();
        assert!(b
            .set_parameter("/", "federation-upstream", "s", json!({"uri": "amqp://g"}))
            .unwrap());
        assert!(!b
            .set_parameter("/", "federation-upstream", "s", json!({"uri": "amqp://h"}))
            .unwrap());
        // A shovel is validated as RabbitMQ validates it (and stored when valid).
        let e = b
            .set_parameter("/", "shovel", "s", json!({"src-uri": "amqp://"}))
            .unwrap_err();
        assert!(e.text.contains("Validation failed"), "{}", e.text);
        assert!(b.parameter("/", "shovel", "s").is_none());
        let e = b.set_parameter("/", "nope", "s", json!(1)).unwrap_err();
        assert!(e.text.contains("component nope not found"), "{}", e.text);
        let e = b.set_parameter("/", "policy", "p", json!({})).unwrap_err();
        assert!(e.text.contains("may not be set"), "{}", e.text);
        assert!(b
            .set_parameter("/", "vhost-limits", "limits", json!({"max-queues": 3}))
            .unwrap());
        assert_eq!(b.vhost_limits("/").unwrap().get("max-queues"), Some(&3));
        let op = json!({"pattern": ".*", "definition": {"max-length": 2}, "priority": 0,
                        "apply-to": "queues"});
        assert!(b.set_parameter("/", "operator_policy", "op", op).unwrap());
        assert_eq!(b.operator_policies().len(), 1);
        let names: Vec<String> = b.parameters().into_iter().map(|p| p.component).collect();
        assert_eq!(
            names,
            vec!["federation-upstream", "operator_policy", "vhost-limits"]
        );
        b.clear_parameter("/", "vhost-limits", "limits").unwrap();
        assert!(b.vhost_limits("/").unwrap().is_empty());
        b.clear_parameter("/", "operator_policy", "op").unwrap();
        b.clear_parameter("/", "federation-upstream", "s").unwrap();
        let e = b
            .clear_parameter("/", "federation-upstream", "s")
            .unwrap_err();
        assert_eq!(e.text, "Parameter does not exist");
        assert!(b.parameters().is_empty());
        let big = json!("x".repeat(PARAMETER_VALUE_BYTES_MAX));
        assert!(b
            .set_parameter("/", "federation-upstream", "big", big)
            .is_err());
    }

    #[test]
    fn global_parameters_and_the_cluster_name() {
        let b = broker();
        assert_eq!(b.cluster_name(), None);
        assert!(b.set_global_parameter(CLUSTER_NAME, json!("c1")).unwrap());
        assert!(!b.set_global_parameter(CLUSTER_NAME, json!("c2")).unwrap());
        assert_eq!(b.cluster_name().as_deref(), Some("c2"));
        assert!(b.set_global_parameter(CLUSTER_NAME, json!(5)).is_err());
        b.set_global_parameter("mqtt-port-to-vhost-mapping", json!({"1883": "/"}))
            .unwrap();
        assert_eq!(b.global_parameters().len(), 2);
        b.clear_global_parameter(CLUSTER_NAME).unwrap();
        assert!(b.clear_global_parameter(CLUSTER_NAME).is_err());
        assert_eq!(b.cluster_name(), None);
    }
}
