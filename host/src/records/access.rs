//! Who is asking: the authenticated caller (or the server itself), and the request facts rules
//! read as `@request.*`, as plain data borrowed from the request.

use super::json::Viewer;
use crate::plugins::{CallFacts, Principal};
use crate::query::RequestInfo;
use crate::schema::value::from_stored;
use crate::schema::{Collection, FieldType, SUPERUSERS_ID};
use crate::store::StoreRecord;
use serde_json::{Map, Value, json};
use std::sync::{Arc, LazyLock};

/// The authenticated caller: the auth record a valid token names.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub collection: Arc<Collection>,
    pub record: StoreRecord,
    pub refreshable: bool,
}

impl Caller {
    pub(crate) fn is_superuser(&self) -> bool {
        self.collection.id == SUPERUSERS_ID
    }

    pub(crate) fn id(&self) -> String {
        self.value("id").as_str().unwrap_or("").to_owned()
    }

    /// The caller as plugins see it.
    pub(crate) fn principal(&self) -> Principal {
        Principal {
            collection: self.collection.name.clone(),
            id: self.id(),
            is_superuser: self.is_superuser(),
        }
    }

    pub(crate) fn value(&self, name: &str) -> Value {
        self.collection
            .fields
            .iter()
            .position(|f| f.name == name)
            .map(|i| from_stored(&self.collection.fields[i], self.record[i].clone()))
            .unwrap_or(Value::Null)
    }

    /// The caller as `@request.auth` sees it: every field (hidden ones included) plus the
    /// collection keys.
    pub(crate) fn as_rule_map(&self) -> Map<String, Value> {
        let mut m = Map::new();
        for (i, f) in self.collection.fields.iter().enumerate() {
            // Rules see the stored hash of a password, which the API form blanks.
            let v = if f.kind == FieldType::Password {
                json!(self.collection.stored_text(&self.record, &f.name))
            } else {
                from_stored(f, self.record[i].clone())
            };
            m.insert(f.name.clone(), v);
        }
        m.insert("collectionId".into(), json!(self.collection.id));
        m.insert("collectionName".into(), json!(self.collection.name));
        m
    }
}

/// A request's headers as `@request.headers` and plugins read them. The HTTP layer implements
/// it for its header map, so nothing is copied unless a rule or a hook asks.
pub(crate) trait RequestHeaders: Sync {
    /// Each header as (name, value); a value that is not text is "".
    fn each(&self, f: &mut dyn FnMut(&str, &str));
}

/// No headers: the server's own calls.
impl RequestHeaders for () {
    fn each(&self, _: &mut dyn FnMut(&str, &str)) {}
}

/// Headers given as pairs (a realtime subscription's `options.headers`).
impl RequestHeaders for Vec<(String, String)> {
    fn each(&self, f: &mut dyn FnMut(&str, &str)) {
        for (k, v) in self {
            f(k, v);
        }
    }
}

static NO_QUERY: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);

/// Who is asking, and in which request. Borrowed from the request for the length of one call;
/// `@request.*` is built on first use only, so a public read without a filter never copies
/// headers, query or the caller's fields.
pub(crate) struct Access<'a> {
    pub who: Option<&'a Caller>,
    /// A read or write made by the server itself (a plugin's record call, a job): no rules.
    pub system: bool,
    /// Plugin calls this one is nested in.
    pub depth: u8,
    pub method: &'a str,
    pub path: &'a str,
    pub remote_ip: Option<&'a str>,
    /// `@request.context`: "default", or "batch" inside a batch.
    pub context: &'static str,
    headers: &'a dyn RequestHeaders,
    query: &'a Map<String, Value>,
    body: Option<&'a Map<String, Value>>,
    built: std::sync::OnceLock<RequestInfo>,
}

impl<'a> Access<'a> {
    /// A client's request.
    pub(crate) fn request(
        who: Option<&'a Caller>,
        method: &'a str,
        path: &'a str,
        headers: &'a dyn RequestHeaders,
        query: &'a Map<String, Value>,
        remote_ip: Option<&'a str>,
    ) -> Self {
        Self {
            who,
            system: false,
            depth: 0,
            method,
            path,
            remote_ip,
            context: "default",
            headers,
            query,
            body: None,
            built: std::sync::OnceLock::new(),
        }
    }

    /// The same access in another `@request.context` ("batch").
    pub(crate) fn in_context(mut self, context: &'static str) -> Self {
        self.context = context;
        self
    }

    /// The server itself, `depth` plugin calls deep: rules do not apply.
    pub(crate) fn system(depth: u8) -> Access<'static> {
        Access {
            who: None,
            system: true,
            depth,
            method: "POST",
            path: "",
            remote_ip: None,
            context: "default",
            headers: &(),
            query: &NO_QUERY,
            body: None,
            built: std::sync::OnceLock::new(),
        }
    }

    /// A plugin's read on behalf of `who` (the caller its call was made for), or the system's.
    pub(crate) fn for_plugin(who: Option<&'a Caller>, system: bool) -> Access<'a> {
        Access {
            who,
            system,
            depth: 0,
            method: "GET",
            path: "",
            remote_ip: None,
            context: "default",
            headers: &(),
            query: &NO_QUERY,
            body: None,
            built: std::sync::OnceLock::new(),
        }
    }

    /// The same access with `@request.body` set (create and update rules read it).
    pub(crate) fn with_body<'b>(&'b self, body: &'b Map<String, Value>) -> Access<'b> {
        Access {
            who: self.who,
            system: self.system,
            depth: self.depth,
            method: self.method,
            path: self.path,
            remote_ip: self.remote_ip,
            context: self.context,
            headers: self.headers,
            query: self.query,
            body: Some(body),
            built: std::sync::OnceLock::new(),
        }
    }

    /// Superusers and the system are past every rule.
    pub(crate) fn is_superuser(&self) -> bool {
        self.system || self.who.is_some_and(Caller::is_superuser)
    }

    /// What `@request.*` means here.
    pub(crate) fn info(&self) -> &RequestInfo {
        self.built.get_or_init(|| {
            let mut headers = Map::new();
            self.headers.each(&mut |k, v| {
                let name = k.to_ascii_lowercase().replace('-', "_");
                headers.entry(name).or_insert_with(|| json!(v));
            });
            RequestInfo {
                auth: self.who.map(Caller::as_rule_map),
                is_superuser: self.is_superuser(),
                body: self.body.cloned().unwrap_or_default(),
                query: self.query.clone(),
                headers,
                method: self.method.to_owned(),
                context: self.context.into(),
            }
        })
    }

    /// Who sees the records in a response (hidden fields, emails).
    pub(crate) fn viewer(&self) -> Viewer {
        match self.who {
            Some(c) => Viewer {
                superuser: c.is_superuser(),
                caller_collection: c.collection.id.clone(),
                caller_id: c.id(),
                owner_view: false,
                managed: None,
            },
            None => Viewer::default(),
        }
    }

    /// What a plugin call made within this access knows of it (its `call-context`).
    pub(crate) fn facts(&self) -> CallFacts {
        let mut headers = Vec::new();
        self.headers
            .each(&mut |k, v| headers.push((k.to_owned(), v.to_owned())));
        CallFacts {
            principal: self.who.map(Caller::principal),
            system: self.system,
            method: Some(self.method.to_owned()),
            path: Some(self.path.to_owned()),
            headers,
            remote_ip: self.remote_ip.map(str::to_owned),
            caller: self
                .who
                .map(|w| Arc::new(w.clone()) as Arc<dyn std::any::Any + Send + Sync>),
            depth: self.depth,
            uploads: Vec::new(),
        }
    }
}
