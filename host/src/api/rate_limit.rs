//! PocketBase's rate limits (`settings.rateLimits`): a rule is found by label (`METHOD /path`,
//! `/path` or a `/prefix/`, and for collection routes `collection:action` and `*:action`) and
//! audience; each rule counts requests per client address in fixed windows of `duration`
//! seconds. Superusers and `excludedIPs` are never limited. Costs one settings look per request
//! while rate limits are off (the default).

use super::error::ApiError;
use super::{AppState, Caller, caller, client_ip};
use crate::schema::Collection;
use crate::settings::{RateLimitRule, RateLimits, Settings, ip_in_list};
use axum::http::{Extensions, HeaderMap};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The counters. They start over whenever the settings change, as PocketBase's do.
#[derive(Default)]
pub(crate) struct Limiters {
    state: Mutex<Counters>,
}

#[derive(Default)]
struct Counters {
    /// The settings these counters were made for.
    settings: Option<Arc<Settings>>,
    limiters: HashMap<String, Limiter>,
}

struct Limiter {
    max: i64,
    interval: i64,
    clients: HashMap<String, Window>,
    /// Windows opened since the last sweep of expired ones.
    since_sweep: usize,
}

/// One client's current window.
struct Window {
    start: i64,
    available: i64,
}

/// Expired windows are dropped every this many new clients of a limiter, so the map holds
/// about the clients of one window, not every address ever seen.
const SWEEP_EVERY: usize = 1024;

impl Limiter {
    fn allow(&mut self, client: &str, now: i64) -> bool {
        if !self.clients.contains_key(client) {
            self.since_sweep += 1;
            if self.since_sweep >= SWEEP_EVERY {
                let interval = self.interval;
                self.clients.retain(|_, w| now - w.start < interval);
                self.since_sweep = 0;
            }
        }
        let w = self.clients.entry(client.to_owned()).or_insert(Window {
            start: i64::MIN,
            available: 0,
        });
        if now.saturating_sub(w.start) >= self.interval {
            w.start = now;
            w.available = self.max;
        }
        if w.available > 0 {
            w.available -= 1;
            return true;
        }
        false
    }
}

impl Limiters {
    /// Count one request of `client` against `rule` under the limiter `id`.
    fn allow(
        &self,
        settings: &Arc<Settings>,
        id: &str,
        rule: &RateLimitRule,
        client: &str,
    ) -> bool {
        let Ok(mut c) = self.state.lock() else {
            return true;
        };
        if !c
            .settings
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, settings))
        {
            c.limiters.clear();
            c.settings = Some(Arc::clone(settings));
        }
        let limiter = c.limiters.entry(id.to_owned()).or_insert_with(|| Limiter {
            max: rule.max_requests,
            interval: rule.duration,
            clients: HashMap::new(),
            since_sweep: 0,
        });
        limiter.allow(client, chrono::Utc::now().timestamp())
    }
}

/// PocketBase's rule search: for each label in order, a rule with exactly that label (and an
/// allowed audience), else a rule whose label is a path prefix (ending in `/`) of it.
fn find_rule<'a>(
    limits: &'a RateLimits,
    labels: &[String],
    audiences: &[&str],
) -> Option<&'a RateLimitRule> {
    let audience_ok = |r: &RateLimitRule| audiences.contains(&r.audience.as_str());
    let prefixes: Vec<&RateLimitRule> = limits
        .rules
        .iter()
        .filter(|r| r.label.ends_with('/'))
        .collect();
    for label in labels {
        if let Some(r) = limits
            .rules
            .iter()
            .find(|r| &r.label == label && audience_ok(r))
        {
            return Some(r);
        }
        let with_slash = format!("{label}/");
        if let Some(r) = prefixes
            .iter()
            .find(|r| with_slash.starts_with(r.label.as_str()) && audience_ok(r))
        {
            return Some(r);
        }
    }
    None
}

fn too_many() -> ApiError {
    super::error::too_many_requests()
}

/// What one check needs to know of the request.
pub(crate) struct Asking<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    pub extensions: &'a Extensions,
}

/// Check a request against the rule its labels find; `id_base` names the limiter (a rule's own
/// label for plain routes, the collection and action for collection routes).
fn check(
    state: &AppState,
    settings: &Arc<Settings>,
    ask: &Asking<'_>,
    who: Option<&Caller>,
    labels: &[String],
    id_base: Option<&str>,
) -> Result<(), ApiError> {
    let limits = &settings.rate_limits;
    let client = client_ip(settings, ask.headers, ask.extensions);
    if who.is_some_and(Caller::is_superuser) || ip_in_list(&limits.excluded_ips, &client) {
        return Ok(());
    }
    let audiences: &[&str] = if who.is_some() {
        &["", "@auth"]
    } else {
        &["", "@guest"]
    };
    let Some(rule) = find_rule(limits, labels, audiences) else {
        return Ok(());
    };
    if client.is_empty() {
        return Ok(());
    }
    let id = format!("{}{}", id_base.unwrap_or(&rule.label), rule.audience);
    if state.limiters.allow(settings, &id, rule, &client) {
        Ok(())
    } else {
        Err(too_many())
    }
}

fn route_labels(ask: &Asking<'_>) -> Vec<String> {
    vec![format!("{} {}", ask.method, ask.path), ask.path.to_owned()]
}

/// The routes that check their collection's rules themselves (records and auth actions): the
/// plain check skips them, as PocketBase unbinds its default limiter there.
fn collection_scoped(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/api/collections/") else {
        return false;
    };
    let mut parts = rest.split('/');
    let (Some(_collection), Some(action)) = (parts.next(), parts.next()) else {
        return false;
    };
    action == "records"
        || action.starts_with("auth-")
        || action.starts_with("request-")
        || action.starts_with("confirm-")
        || action == "impersonate"
}

/// The check every other route gets (in the common middleware).
pub(crate) async fn check_route(state: &AppState, ask: &Asking<'_>) -> Result<(), ApiError> {
    // Every request passes here: a look without a reference count while the limits are off.
    if !state.settings.peek().rate_limits.enabled || collection_scoped(ask.path) {
        return Ok(());
    }
    let settings = state.settings.current();
    let who = caller(state, ask.headers).await;
    check(
        state,
        &settings,
        ask,
        who.as_ref(),
        &route_labels(ask),
        None,
    )
}

/// The check of a collection route for `tags` (its action, then broader ones such as `auth`):
/// labels `collection:tag`, then `*:tag`, then the route's own.
pub(crate) fn check_collection(
    state: &AppState,
    ask: &Asking<'_>,
    who: Option<&Caller>,
    c: &Collection,
    tags: &[&str],
) -> Result<(), ApiError> {
    if !state.settings.peek().rate_limits.enabled {
        return Ok(());
    }
    let settings = state.settings.current();
    let mut labels: Vec<String> = tags.iter().map(|t| format!("{}:{t}", c.name)).collect();
    labels.extend(tags.iter().map(|t| format!("*:{t}")));
    labels.extend(route_labels(ask));
    let id = format!("{}{}{}", c.id, ask.method, tags.concat());
    check(state, &settings, ask, who, &labels, Some(&id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(label: &str, audience: &str) -> RateLimitRule {
        RateLimitRule {
            label: label.into(),
            audience: audience.into(),
            duration: 10,
            max_requests: 2,
        }
    }

    #[test]
    fn rules_are_found_by_label_then_prefix() {
        let limits = RateLimits {
            rules: vec![
                rule("/api/", ""),
                rule("posts:create", "@auth"),
                rule("*:create", ""),
            ],
            excluded_ips: vec![],
            enabled: true,
        };
        let labels = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let guest = &["", "@guest"];
        let auth = &["", "@auth"];
        let create = labels(&[
            "posts:create",
            "*:create",
            "POST /api/collections/posts/records",
            "/api/collections/posts/records",
        ]);
        assert_eq!(
            find_rule(&limits, &create, auth).unwrap().label,
            "posts:create"
        );
        assert_eq!(
            find_rule(&limits, &create, guest).unwrap().label,
            "*:create"
        );
        let health = labels(&["GET /api/health", "/api/health"]);
        assert_eq!(find_rule(&limits, &health, guest).unwrap().label, "/api/");
        assert!(find_rule(&limits, &labels(&["GET /x", "/x"]), guest).is_none());
    }

    #[test]
    fn a_window_allows_its_maximum_then_starts_over() {
        let mut l = Limiter {
            max: 2,
            interval: 10,
            clients: HashMap::new(),
            since_sweep: 0,
        };
        assert!(l.allow("a", 100));
        assert!(l.allow("a", 101));
        assert!(!l.allow("a", 105));
        assert!(l.allow("b", 105), "clients are counted apart");
        assert!(l.allow("a", 110), "a new window");
    }

    #[test]
    fn collection_routes_are_told_apart() {
        assert!(collection_scoped("/api/collections/posts/records"));
        assert!(collection_scoped(
            "/api/collections/users/auth-with-password"
        ));
        assert!(!collection_scoped("/api/collections/posts"));
        assert!(!collection_scoped("/api/health"));
    }
}
