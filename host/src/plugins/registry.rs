//! The immutable dispatch tables: hooks per collection id, auth hooks per auth collection id,
//! the routes' matchers, the jobs.
//! Built whole from the loaded plugins and swapped in one store; never mutated.

use super::bindings::exports::ferrobase::plugin::manifest::HookEvent;
use super::instance::Loaded;
use crate::schema::Schema;
use std::collections::HashMap;
use std::sync::Arc;

/// The hooks one collection has, by event, in plugin-name order.
#[derive(Default)]
pub(crate) struct HookSlots {
    pub before_create: Vec<Arc<Loaded>>,
    pub before_update: Vec<Arc<Loaded>>,
    pub before_delete: Vec<Arc<Loaded>>,
    pub in_transaction: Vec<Arc<Loaded>>,
    pub after_commit: Vec<Arc<Loaded>>,
}

/// One route a plugin serves.
#[derive(Clone)]
pub(crate) struct RouteRef {
    pub plugin: Arc<Loaded>,
    pub pattern: String,
    pub require_auth: bool,
}

/// One cron job.
#[derive(Clone)]
pub(crate) struct JobRef {
    pub id: String,
    pub expression: String,
    pub schedule: croner::Cron,
    pub plugin: Arc<Loaded>,
}

pub(crate) struct Registry {
    pub plugins: Vec<Arc<Loaded>>,
    hooks: HashMap<String, HookSlots>,
    /// The plugins asked before a sign-in on an auth collection (by id), in plugin-name order.
    auth: HashMap<String, Vec<Arc<Loaded>>>,
    /// One matcher per method; "*" routes sit in every method's matcher and in `any`.
    routes: HashMap<String, matchit::Router<RouteRef>>,
    any: matchit::Router<RouteRef>,
    pub jobs: Vec<JobRef>,
}

/// Paths the server itself answers (or will, as PocketBase does): a plugin route may not sit
/// under any of them.
const NATIVE_PREFIXES: &[&str] = &[
    "/api/collections",
    "/api/health",
    "/api/crons",
    "/api/plugins",
    "/api/batch",
    "/api/realtime",
    "/api/files",
    "/api/settings",
    "/api/logs",
    "/api/backups",
    "/api/superusers",
    "/_",
];

const METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

pub(super) fn shadows_native(path: &str) -> Option<&'static str> {
    let lower = path.to_ascii_lowercase();
    // A parameter in the first segments could capture any native path.
    if lower.starts_with("/{") || lower.starts_with("/api/{") {
        return Some("/api");
    }
    NATIVE_PREFIXES.iter().copied().find(|p| {
        lower == *p
            || lower
                .strip_prefix(p)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// PocketBase's cron syntax: five fields or a macro.
pub(crate) fn parse_cron(expr: &str) -> Result<croner::Cron, String> {
    let e = expr.trim();
    let macro_ok = matches!(
        e,
        "@yearly" | "@annually" | "@monthly" | "@weekly" | "@daily" | "@midnight" | "@hourly"
    );
    if !macro_ok && e.split_whitespace().count() != 5 {
        return Err(format!(
            "cron {expr:?} must have five fields (minute hour day month weekday) or be a macro like @daily"
        ));
    }
    e.parse::<croner::Cron>()
        .map_err(|err| format!("cron {expr:?}: {err}"))
}

impl Registry {
    pub(crate) fn empty() -> Self {
        Self {
            plugins: Vec::new(),
            hooks: HashMap::new(),
            auth: HashMap::new(),
            routes: HashMap::new(),
            any: matchit::Router::new(),
            jobs: Vec::new(),
        }
    }

    /// The hooks of one collection (by id), if any plugin bound it. The only question a write
    /// asks.
    pub(crate) fn hooks(&self, collection_id: &str) -> Option<&HookSlots> {
        if self.hooks.is_empty() {
            return None;
        }
        self.hooks.get(collection_id)
    }

    /// The auth hooks of one auth collection (by id): empty when no plugin hooks its sign-ins.
    pub(crate) fn auth_hooks(&self, collection_id: &str) -> &[Arc<Loaded>] {
        if self.auth.is_empty() {
            return &[];
        }
        self.auth.get(collection_id).map_or(&[], Vec::as_slice)
    }

    /// The route for a method and path, with its parameters.
    pub(crate) fn route(
        &self,
        method: &str,
        path: &str,
    ) -> Option<(RouteRef, Vec<(String, String)>)> {
        let m = self.routes.get(method).and_then(|r| r.at(path).ok());
        let m = m.or_else(|| self.any.at(path).ok())?;
        let params = m
            .params
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Some((m.value.clone(), params))
    }

    /// Check one plugin against the schema and what is already accepted: collections it hooks
    /// must exist, routes may not shadow native ones or collide, job ids must be unique and
    /// their cron valid.
    fn admit(&self, p: &Arc<Loaded>, schema: &Schema) -> Result<(), String> {
        for (coll, _) in &p.manifest.hooks {
            if schema.by_id_or_name(coll).is_none() {
                return Err(format!("hooks unknown collection {coll:?}"));
            }
        }
        for coll in &p.manifest.auth_hooks {
            if coll == "*" {
                continue;
            }
            match schema.by_id_or_name(coll) {
                Some(c) if c.is_auth() => {}
                Some(_) => {
                    return Err(format!(
                        "hooks sign-ins on {coll:?}, not an auth collection"
                    ));
                }
                None => return Err(format!("hooks sign-ins on unknown collection {coll:?}")),
            }
        }
        let mut trial = self.routes.clone();
        let mut any = self.any.clone();
        for r in &p.manifest.routes {
            if !r.path.starts_with('/') {
                return Err(format!("route {:?} must start with /", r.path));
            }
            if let Some(native) = shadows_native(&r.path) {
                return Err(format!(
                    "route {} {} would shadow the built-in {native} routes",
                    r.method, r.path
                ));
            }
            let method = r.method.to_ascii_uppercase();
            let targets: Vec<&str> = if method == "*" {
                METHODS.to_vec()
            } else if METHODS.contains(&method.as_str()) {
                vec![method.as_str()]
            } else {
                return Err(format!("route {:?}: unknown method {:?}", r.path, r.method));
            };
            let rr = RouteRef {
                plugin: Arc::clone(p),
                pattern: r.path.clone(),
                require_auth: r.require_auth,
            };
            for m in targets {
                trial
                    .entry(m.to_owned())
                    .or_default()
                    .insert(r.path.clone(), rr.clone())
                    .map_err(|e| format!("route {m} {} collides: {e}", r.path))?;
            }
            if method == "*" {
                any.insert(r.path.clone(), rr)
                    .map_err(|e| format!("route * {} collides: {e}", r.path))?;
            }
        }
        for j in &p.manifest.jobs {
            if self.jobs.iter().any(|x| x.id == j.name) || j.name.is_empty() {
                return Err(format!("job id {:?} is empty or already taken", j.name));
            }
            parse_cron(&j.cron)?;
        }
        Ok(())
    }

    fn add(&mut self, p: Arc<Loaded>, schema: &Schema) {
        for (coll, events) in &p.manifest.hooks {
            let Some(c) = schema.by_id_or_name(coll) else {
                continue;
            };
            let slots = self.hooks.entry(c.id.clone()).or_default();
            for e in events {
                let v = match e {
                    HookEvent::BeforeCreate => &mut slots.before_create,
                    HookEvent::BeforeUpdate => &mut slots.before_update,
                    HookEvent::BeforeDelete => &mut slots.before_delete,
                    HookEvent::InTransaction => &mut slots.in_transaction,
                    HookEvent::AfterCommit => &mut slots.after_commit,
                };
                if !v.iter().any(|x| Arc::ptr_eq(x, &p)) {
                    v.push(Arc::clone(&p));
                }
            }
        }
        for coll in &p.manifest.auth_hooks {
            let ids: Vec<String> = if coll == "*" {
                schema
                    .collections
                    .iter()
                    .filter(|c| c.is_auth())
                    .map(|c| c.id.clone())
                    .collect()
            } else {
                schema
                    .by_id_or_name(coll)
                    .map(|c| c.id.clone())
                    .into_iter()
                    .collect()
            };
            for id in ids {
                let v = self.auth.entry(id).or_default();
                if !v.iter().any(|x| Arc::ptr_eq(x, &p)) {
                    v.push(Arc::clone(&p));
                }
            }
        }
        for r in &p.manifest.routes {
            let method = r.method.to_ascii_uppercase();
            let rr = RouteRef {
                plugin: Arc::clone(&p),
                pattern: r.path.clone(),
                require_auth: r.require_auth,
            };
            let targets: Vec<&str> = if method == "*" {
                METHODS.to_vec()
            } else {
                vec![method.as_str()]
            };
            for m in targets {
                let _ = self
                    .routes
                    .entry(m.to_owned())
                    .or_default()
                    .insert(r.path.clone(), rr.clone());
            }
            if method == "*" {
                let _ = self.any.insert(r.path.clone(), rr);
            }
        }
        for j in &p.manifest.jobs {
            if let Ok(schedule) = parse_cron(&j.cron) {
                self.jobs.push(JobRef {
                    id: j.name.clone(),
                    expression: j.cron.clone(),
                    schedule,
                    plugin: Arc::clone(&p),
                });
            }
        }
        self.plugins.push(p);
    }

    /// Build from candidates in order. A candidate that does not fit is refused with its
    /// reason; when it was a new version, `fallback` (the version it was to replace) is tried
    /// in its place so a broken update keeps the old one serving.
    pub(crate) fn build(
        candidates: Vec<(Arc<Loaded>, Option<Arc<Loaded>>)>,
        schema: &Schema,
    ) -> (Self, Vec<(std::path::PathBuf, String)>) {
        let mut reg = Self::empty();
        let mut refused = Vec::new();
        for (p, fallback) in candidates {
            if reg.plugins.iter().any(|x| x.name() == p.name()) {
                refused.push((
                    p.file.clone(),
                    format!("another file already provides plugin {:?}", p.name()),
                ));
                continue;
            }
            match reg.admit(&p, schema) {
                Ok(()) => reg.add(p, schema),
                Err(e) => {
                    refused.push((p.file.clone(), e));
                    if let Some(old) = fallback
                        && reg.admit(&old, schema).is_ok()
                    {
                        reg.add(old, schema);
                    }
                }
            }
        }
        (reg, refused)
    }
}

#[cfg(test)]
mod tests {
    use super::shadows_native;

    #[test]
    fn native_prefixes_and_leading_parameters_are_taken() {
        assert_eq!(
            shadows_native("/api/collections/posts/records"),
            Some("/api/collections")
        );
        assert_eq!(shadows_native("/API/Health"), Some("/api/health"));
        assert_eq!(shadows_native("/_/x"), Some("/_"));
        assert_eq!(shadows_native("/{any}"), Some("/api"));
        assert_eq!(shadows_native("/api/{name}/x"), Some("/api"));
        assert_eq!(shadows_native("/api/collectionsx"), None);
        assert_eq!(shadows_native("/api/hello/{name}"), None);
    }
}
