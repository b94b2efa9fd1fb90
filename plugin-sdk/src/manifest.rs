//! The manifest a plugin describes itself with: what it binds and which grants it wants.

use crate::bindings::exports::ferrobase::plugin::manifest as wit;

/// The manifest extra that names the auth collections whose sign-ins the plugin hooks.
const AUTH_HOOKS: &str = "auth-hooks";

/// A record event a hook binds to.
pub type Event = wit::HookEvent;

/// What the plugin handles; the host never calls it for anything else.
///
/// ```
/// use ferrobase_plugin::{Event, Manifest};
/// let m = Manifest::new("audit", "1.0.0")
///     .hook("posts", &[Event::InTransaction, Event::AfterCommit])
///     .route("GET", "/api/audit/stats")
///     .auth_route("POST", "/api/audit/mark")
///     .job("audit_prune", "@daily")
///     .wants(&["db:write", "kv"]);
/// assert_eq!(m.name(), "audit");
/// ```
#[derive(Clone, Debug)]
pub struct Manifest {
    inner: wit::Manifest,
}

impl Manifest {
    /// A manifest that binds nothing yet.
    pub fn new(name: &str, version: &str) -> Self {
        Manifest {
            inner: wit::Manifest {
                name: name.to_owned(),
                version: version.to_owned(),
                hooks: Vec::new(),
                routes: Vec::new(),
                jobs: Vec::new(),
                wants: Vec::new(),
                extra: Vec::new(),
            },
        }
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Binds `events` on the collection `collection` (which must exist when the plugin loads).
    #[must_use]
    pub fn hook(mut self, collection: &str, events: &[Event]) -> Self {
        let hooks = &mut self.inner.hooks;
        let binding = match hooks.iter().position(|h| h.collection == collection) {
            Some(i) => &mut hooks[i],
            None => {
                hooks.push(wit::HookBinding {
                    collection: collection.to_owned(),
                    events: Vec::new(),
                });
                hooks.last_mut().expect("just pushed")
            }
        };
        for event in events {
            if !binding.events.contains(event) {
                binding.events.push(*event);
            }
        }
        self
    }

    /// A public route: `method` is `"GET"`, `"POST"`, ... or `"*"`; `path` like
    /// `"/api/my-plugin/items/{id}"` or `"/files/{*rest}"`.
    #[must_use]
    pub fn route(self, method: &str, path: &str) -> Self {
        self.push_route(method, path, false)
    }

    /// A route the host answers with 401 for guests.
    #[must_use]
    pub fn auth_route(self, method: &str, path: &str) -> Self {
        self.push_route(method, path, true)
    }

    /// A scheduled job: `cron` is five fields (`"0 3 * * *"`) or a macro (`"@daily"`).
    #[must_use]
    pub fn job(mut self, name: &str, cron: &str) -> Self {
        self.inner.jobs.push(wit::JobBinding {
            name: name.to_owned(),
            cron: cron.to_owned(),
        });
        self
    }

    /// Capabilities asked for: `"db:read"`, `"db:write"`, `"kv"`, `"http"`, `"clock"` (a real
    /// wall clock; without it the clock reads the Unix epoch), and
    /// `"db:hidden:<collection>.<field>"` (raw SQL on one hidden field). Each must be granted in
    /// pb.toml or the plugin does not load, and a plugin holds only what it asks for here.
    #[must_use]
    pub fn wants(mut self, grants: &[&str]) -> Self {
        for grant in grants {
            if !self.inner.wants.iter().any(|w| w == grant) {
                self.inner.wants.push((*grant).to_owned());
            }
        }
        self
    }

    /// Asks the host to call [`crate::Plugin::authenticate`] before a sign-in on the auth
    /// collection `collection` (`"*"`: every auth collection) gets its token. Each named
    /// collection must exist and be an auth collection when the plugin loads.
    #[must_use]
    pub fn auth_hook(mut self, collection: &str) -> Self {
        let extra = &mut self.inner.extra;
        match extra.iter_mut().find(|(k, _)| k == AUTH_HOOKS) {
            Some((_, names)) => {
                if !names.split(',').any(|n| n == collection) {
                    names.push(',');
                    names.push_str(collection);
                }
            }
            None => extra.push((AUTH_HOOKS.to_owned(), collection.to_owned())),
        }
        self
    }

    /// A forward-compatible extra; the host ignores keys it does not know.
    #[must_use]
    pub fn extra(mut self, key: &str, value: &str) -> Self {
        self.inner.extra.push((key.to_owned(), value.to_owned()));
        self
    }

    /// The generated record the host receives.
    pub fn into_wit(self) -> wit::Manifest {
        self.inner
    }

    fn push_route(mut self, method: &str, path: &str, require_auth: bool) -> Self {
        self.inner.routes.push(wit::RouteBinding {
            method: method.to_owned(),
            path: path.to_owned(),
            require_auth,
        });
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_on_one_collection_merge_without_duplicates() {
        let m = Manifest::new("p", "1")
            .hook("posts", &[Event::BeforeCreate])
            .hook("posts", &[Event::BeforeCreate, Event::BeforeUpdate])
            .hook("tags", &[Event::AfterCommit])
            .wants(&["kv", "kv", "http"])
            .into_wit();
        assert_eq!(m.hooks.len(), 2);
        assert_eq!(
            m.hooks[0].events,
            [Event::BeforeCreate, Event::BeforeUpdate]
        );
        assert_eq!(m.wants, ["kv", "http"]);
    }

    #[test]
    fn auth_hooks_collect_in_one_extra() {
        let m = Manifest::new("p", "1")
            .auth_hook("users")
            .auth_hook("members")
            .auth_hook("users")
            .extra("k", "v")
            .into_wit();
        assert_eq!(
            m.extra,
            [
                ("auth-hooks".to_owned(), "users,members".to_owned()),
                ("k".to_owned(), "v".to_owned())
            ]
        );
    }

    #[test]
    fn routes_keep_their_auth_flag() {
        let m = Manifest::new("p", "1")
            .route("GET", "/api/p/a")
            .auth_route("POST", "/api/p/b")
            .into_wit();
        let flags: Vec<_> = m
            .routes
            .iter()
            .map(|r| (r.method.as_str(), r.require_auth))
            .collect();
        assert_eq!(flags, [("GET", false), ("POST", true)]);
    }
}
