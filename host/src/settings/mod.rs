//! Owns PocketBase's settings: the typed value, its two JSON forms (stored in `_params`, shown by
//! the API with secrets left out), how a PATCH is bound and validated, and the live snapshot that
//! readers load without touching the database. Knows nothing about HTTP; asks `store` to persist.

mod bind;
mod validate;

use crate::store::{Keep, Store, StoreError, params};
use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::Arc;

pub(crate) use validate::{ip_in_list, is_email};

/// The `_params` row PocketBase keeps its settings in.
const PARAMS_KEY: &str = "settings";

/// PocketBase's settings, field for field and in its order (the stored JSON is what its Go
/// encoder writes, so a `pb_data` moves between the two servers unchanged). Missing keys in a
/// stored value keep their defaults, as PocketBase reads them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct Settings {
    #[serde(rename = "superuserIPs")]
    pub superuser_ips: Vec<String>,
    pub smtp: Smtp,
    pub backups: Backups,
    pub s3: S3,
    pub meta: Meta,
    #[serde(rename = "rateLimits")]
    pub rate_limits: RateLimits,
    #[serde(rename = "trustedProxy")]
    pub trusted_proxy: TrustedProxy,
    pub batch: Batch,
    pub logs: Logs,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct Smtp {
    pub enabled: bool,
    pub port: i64,
    pub host: String,
    pub username: String,
    pub password: String,
    pub auth_method: String,
    pub tls: bool,
    pub local_name: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct S3 {
    pub enabled: bool,
    pub bucket: String,
    pub region: String,
    pub endpoint: String,
    pub access_key: String,
    /// Left out of the stored JSON when empty, as PocketBase writes it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub secret: String,
    pub force_path_style: bool,
}

impl S3 {
    /// The bucket this section describes, None when it is not enabled. (Plain data: the
    /// areas that talk to S3 are handed it and never read settings themselves.)
    pub(crate) fn bucket_config(&self) -> Option<crate::files::S3Config> {
        self.enabled.then(|| crate::files::S3Config {
            bucket: self.bucket.clone(),
            region: self.region.clone(),
            endpoint: self.endpoint.clone(),
            access_key: self.access_key.clone(),
            secret: self.secret.clone(),
            force_path_style: self.force_path_style,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct Backups {
    pub cron: String,
    pub cron_max_keep: i64,
    pub s3: S3,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct Meta {
    pub accent_color: String,
    pub app_name: String,
    #[serde(rename = "appURL")]
    pub app_url: String,
    pub sender_name: String,
    pub sender_address: String,
    pub hide_controls: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct RateLimitRule {
    pub label: String,
    pub audience: String,
    pub duration: i64,
    pub max_requests: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct RateLimits {
    pub rules: Vec<RateLimitRule>,
    #[serde(rename = "excludedIPs")]
    pub excluded_ips: Vec<String>,
    pub enabled: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct TrustedProxy {
    pub headers: Vec<String>,
    #[serde(rename = "useLeftmostIP")]
    pub use_leftmost_ip: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct Batch {
    pub enabled: bool,
    pub max_requests: i64,
    /// Seconds the whole batch transaction may take.
    pub timeout: i64,
    /// Bytes; 0 means PocketBase's fallback ([`Batch::DEFAULT_BODY_BYTES`]).
    pub max_body_size: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct Logs {
    pub max_data_size: i64,
    pub max_days: i64,
    pub min_level: i64,
    #[serde(rename = "logIP")]
    pub log_ip: bool,
    pub log_auth_id: bool,
}

impl Default for Settings {
    /// What a fresh PocketBase 0.40.6 writes on its first start.
    fn default() -> Self {
        Self {
            superuser_ips: Vec::new(),
            smtp: Smtp::default(),
            backups: Backups::default(),
            s3: S3::default(),
            meta: Meta::default(),
            rate_limits: RateLimits::default(),
            trusted_proxy: TrustedProxy::default(),
            batch: Batch::default(),
            logs: Logs::default(),
        }
    }
}

impl Default for Smtp {
    fn default() -> Self {
        Self {
            enabled: false,
            port: 587,
            host: "smtp.example.com".into(),
            username: String::new(),
            password: String::new(),
            auth_method: String::new(),
            tls: false,
            local_name: String::new(),
        }
    }
}

impl Default for Backups {
    fn default() -> Self {
        Self {
            cron: String::new(),
            cron_max_keep: 3,
            s3: S3::default(),
        }
    }
}

impl Default for Meta {
    fn default() -> Self {
        Self {
            accent_color: "#1055c9".into(),
            app_name: "Acme".into(),
            app_url: "http://localhost:8090".into(),
            sender_name: "Support".into(),
            sender_address: "support@example.com".into(),
            hide_controls: false,
        }
    }
}

impl Default for RateLimits {
    fn default() -> Self {
        let rule = |label: &str, duration, max_requests| RateLimitRule {
            label: label.into(),
            audience: String::new(),
            duration,
            max_requests,
        };
        Self {
            rules: vec![
                rule("*:auth", 3, 2),
                rule("*:create", 5, 20),
                rule("/api/batch", 1, 3),
                rule("/api/", 10, 300),
            ],
            excluded_ips: Vec::new(),
            enabled: false,
        }
    }
}

impl Default for Batch {
    fn default() -> Self {
        Self {
            enabled: false,
            max_requests: 50,
            timeout: 3,
            max_body_size: 0,
        }
    }
}

impl Batch {
    /// PocketBase's limit for a batch body when `maxBodySize` is 0: 128 MiB.
    pub(crate) const DEFAULT_BODY_BYTES: usize = 128 << 20;

    /// The body limit in bytes.
    pub(crate) fn body_bytes_max(&self) -> usize {
        if self.max_body_size > 0 {
            usize::try_from(self.max_body_size).unwrap_or(usize::MAX)
        } else {
            Self::DEFAULT_BODY_BYTES
        }
    }
}

impl Default for Logs {
    fn default() -> Self {
        Self {
            max_data_size: 0,
            max_days: 5,
            min_level: 0,
            log_ip: true,
            log_auth_id: false,
        }
    }
}

impl Settings {
    /// The stored form: what goes into `_params.value`.
    pub(crate) fn to_stored(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("settings serialize: plain data")
    }

    /// Read a stored value. PocketBase reads it over its defaults, so missing keys keep them.
    pub(crate) fn from_stored(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    /// The API form: secrets are never sent (`smtp.password` is left out, the S3 secrets are
    /// empty and so omitted).
    pub(crate) fn to_api(&self) -> Value {
        let mut shown = self.clone();
        shown.s3.secret.clear();
        shown.backups.s3.secret.clear();
        let mut v = serde_json::to_value(&shown).expect("settings serialize: plain data");
        if let Some(Value::Object(smtp)) = v.get_mut("smtp") {
            // Keeping the order of the other keys, as PocketBase shows them.
            smtp.shift_remove("password");
        }
        v
    }
}

/// Why a settings change was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SettingsError {
    /// The body does not bind onto the settings (wrong types, duplicate keys, not an object).
    #[error("the submitted data does not bind onto the settings: {0}")]
    Bind(String),
    /// The merged settings fail validation: PocketBase's nested field errors.
    #[error("invalid settings")]
    Invalid(Map<String, Value>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The settings in effect: loaded once at start, replaced whole after each committed change.
/// Readers take a snapshot (`current`), never the database.
pub(crate) struct Live {
    current: ArcSwap<Settings>,
    /// One change at a time: a PATCH merges onto the value the previous one committed, so two
    /// racing patches never lose each other's keys or leave a torn value.
    saving: tokio::sync::Mutex<()>,
}

impl Live {
    /// Read the stored settings (PocketBase's defaults when there is no row, or when it cannot
    /// be read, which is logged: an encrypted value, for one).
    pub(crate) async fn load(store: &Store) -> Result<Self, StoreError> {
        let raw = store.read(|conn| params::get(conn, PARAMS_KEY)).await?;
        let settings = match raw {
            None => Settings::default(),
            Some(bytes) => Settings::from_stored(&bytes).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "stored settings could not be read; using the defaults");
                Settings::default()
            }),
        };
        Ok(Self::new(settings))
    }

    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            current: ArcSwap::from_pointee(settings),
            saving: tokio::sync::Mutex::new(()),
        }
    }

    /// The settings in effect now.
    pub(crate) fn current(&self) -> Arc<Settings> {
        self.current.load_full()
    }

    /// A cheap look for the request path (no reference count taken).
    pub(crate) fn peek(&self) -> arc_swap::Guard<Arc<Settings>> {
        self.current.load()
    }

    /// Apply a PATCH body as PocketBase binds it onto the current settings, validate the
    /// result, store it and make it current. Nothing changes unless all of that succeeds.
    pub(crate) async fn update(
        &self,
        store: &Store,
        patch: &Map<String, Value>,
    ) -> Result<Arc<Settings>, SettingsError> {
        let _one_at_a_time = self.saving.lock().await;
        let before = self.current();
        let next = bind::apply(&before, patch)?;
        let errors = validate::settings(&next);
        if !errors.is_empty() {
            return Err(SettingsError::Invalid(errors));
        }
        let bytes = next.to_stored();
        let now = crate::schema::ids::now();
        store
            .write(move |conn| {
                conn.savepoint(|tx| {
                    params::put(tx, PARAMS_KEY, &bytes, &now)?;
                    Ok(Keep::Commit(()))
                })
            })
            .await?;
        let next = Arc::new(next);
        self.current.store(Arc::clone(&next));
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_what_pocketbase_writes_first() {
        // The exact bytes PocketBase 0.40.6 stores in `_params` on a fresh start.
        let pb = r##"{"superuserIPs":[],"smtp":{"enabled":false,"port":587,"host":"smtp.example.com","username":"","password":"","authMethod":"","tls":false,"localName":""},"backups":{"cron":"","cronMaxKeep":3,"s3":{"enabled":false,"bucket":"","region":"","endpoint":"","accessKey":"","forcePathStyle":false}},"s3":{"enabled":false,"bucket":"","region":"","endpoint":"","accessKey":"","forcePathStyle":false},"meta":{"accentColor":"#1055c9","appName":"Acme","appURL":"http://localhost:8090","senderName":"Support","senderAddress":"support@example.com","hideControls":false},"rateLimits":{"rules":[{"label":"*:auth","audience":"","duration":3,"maxRequests":2},{"label":"*:create","audience":"","duration":5,"maxRequests":20},{"label":"/api/batch","audience":"","duration":1,"maxRequests":3},{"label":"/api/","audience":"","duration":10,"maxRequests":300}],"excludedIPs":[],"enabled":false},"trustedProxy":{"headers":[],"useLeftmostIP":false},"batch":{"enabled":false,"maxRequests":50,"timeout":3,"maxBodySize":0},"logs":{"maxDataSize":0,"maxDays":5,"minLevel":0,"logIP":true,"logAuthId":false}}"##;
        assert_eq!(
            String::from_utf8(Settings::default().to_stored()).unwrap(),
            pb
        );
        assert_eq!(
            Settings::from_stored(pb.as_bytes()).unwrap(),
            Settings::default()
        );
    }

    #[test]
    fn secrets_never_reach_the_api_form() {
        let mut s = Settings::default();
        s.smtp.password = "smtp-pw".into();
        s.s3.secret = "s3-secret".into();
        s.backups.s3.secret = "b-secret".into();
        let shown = s.to_api().to_string();
        for secret in [
            "smtp-pw",
            "s3-secret",
            "b-secret",
            "\"password\"",
            "\"secret\"",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        // The stored form keeps them.
        let stored = String::from_utf8(s.to_stored()).unwrap();
        assert!(stored.contains("s3-secret") && stored.contains("smtp-pw"));
    }

    #[test]
    fn a_stored_value_missing_keys_keeps_the_defaults() {
        let s =
            Settings::from_stored(br#"{"meta":{"appName":"Mine"},"logs":{"maxDays":9}}"#).unwrap();
        assert_eq!(s.meta.app_name, "Mine");
        assert_eq!(s.meta.app_url, "http://localhost:8090");
        assert_eq!(s.logs.max_days, 9);
        assert!(s.logs.log_ip);
        assert_eq!(s.rate_limits.rules.len(), 4);
    }
}
