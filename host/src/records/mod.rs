//! Owns the record lifecycle: who is asking (`Access`), the one rule decision per action, reads
//! (list, get, expand) and writes (draft, validation, auth fields, relation checks, hooks, the
//! change feed). No HTTP types: the REST handlers, plugins and (later) batch, realtime and the
//! auth flows all call it, and none of them re-implements a piece of it.

mod access;
pub(crate) mod advice;
pub(crate) mod batch;
pub(crate) mod expand;
pub(crate) mod feed;
pub(crate) mod json;
pub(crate) mod read;
mod rules;
pub(crate) mod services;
pub(crate) mod watch;
mod write;

pub(crate) use access::{Access, Caller, RequestHeaders};
pub(crate) use rules::{
    Action, Gate, auth_rule_allows, condition, gate, manage_rule, manage_rule_text, mfa_rule_wants,
};
pub(crate) use write::Writer;

use crate::plugins::{AuthOutcome, Plugins, Rejection};
use crate::query::QueryError;
use crate::store::{Store, StoreError};
use serde_json::{Map, Value};
use std::sync::Arc;

/// What the record operations need: the store and the plugins whose hooks writes run.
pub(crate) struct Records {
    pub store: Arc<Store>,
    pub plugins: Arc<Plugins>,
    /// Committed changes, in commit order, for after-commit hooks and realtime.
    pub feed: Arc<feed::Feed>,
    /// Where records' files live; writes place and delete them after their commit.
    pub files: Arc<crate::files::Storage>,
    /// Lists that scanned past `[advisor].scan_threshold`, and the indexes that would serve them.
    pub advisor: Arc<advice::Advisor>,
}

pub(crate) const MSG_CREATE_FAILED: &str = "Failed to create record.";
pub(crate) const MSG_UPDATE_FAILED: &str = "Failed to update record.";
/// PocketBase's answer to a sign-in that did not go through.
pub(crate) const MSG_AUTH_FAILED: &str = "Failed to authenticate.";
pub(crate) const MSG_AUTH_RULE_DENIED: &str =
    "The request doesn't satisfy the collection requirements to authenticate.";
pub(crate) const MSG_DELETE_FAILED: &str = "Failed to delete record. Make sure that the record is not part of a required relation reference.";
pub(crate) const MSG_TRUNCATE_FAILED: &str =
    "Failed to truncate collection (most likely due to required cascade delete record references).";

/// Why a record operation did not happen. Every variant keeps PocketBase's words for it; the
/// HTTP layer turns them into statuses in one match (`api/error.rs`), plugins into their own
/// refusals (`services.rs`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    /// No such record, or not one this caller may reach (PocketBase does not tell them apart).
    #[error("record not found")]
    NotFound,
    /// The action's rule is `null`: superusers only.
    #[error("only superusers may do this")]
    SuperusersOnly,
    /// The collection's authRule does not admit this record.
    #[error("the auth rule refused")]
    AuthRuleDenied,
    /// A rule or a client's filter or sort that does not compile, or may not be used.
    #[error("query: {0}")]
    Query(#[from] QueryError),
    /// Field errors, in PocketBase's `data` shape, under the action's message.
    #[error("{message}")]
    Invalid {
        message: &'static str,
        data: Map<String, Value>,
    },
    /// Refused with a message and no field errors (a create rule that does not hold, a view
    /// collection, a required relation, a hook that failed).
    #[error("{0}")]
    Refused(&'static str),
    /// A plugin hook refused, with its own status and body.
    #[error("refused by a plugin: {}", .0.message)]
    Rejected(Rejection),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// Something of ours broke (a hashing thread gone, say).
    #[error("internal: {0}")]
    Internal(String),
}

impl Records {
    /// Finish the file work of writes a crash cut short (the files area's notes): each note's
    /// record is read to learn which side of its COMMIT the write ended on. At start-up, before
    /// the server takes requests.
    pub(crate) async fn finish_interrupted_files(&self) {
        for interrupted in self.files.interrupted() {
            let (cid, rid) = interrupted.record();
            match self.stored_files(cid, rid).await {
                Ok(kept) => {
                    let (cid, rid) = (cid.to_owned(), rid.to_owned());
                    let done = self.files.finish_interrupted(interrupted, kept.as_deref());
                    tracing::info!(
                        collection = %cid,
                        record = %rid,
                        placed = done.placed,
                        discarded = done.discarded,
                        deleted = done.deleted,
                        folders = done.folders,
                        "interrupted file work finished"
                    );
                }
                Err(e) => {
                    tracing::error!(error = %e, "interrupted file work left for the next start");
                    interrupted.keep();
                }
            }
        }
    }

    /// The names a stored record's file fields hold, or None when there is no such record.
    async fn stored_files(
        &self,
        collection_id: &str,
        record_id: &str,
    ) -> std::result::Result<Option<Vec<String>>, StoreError> {
        let schema = self.store.schema();
        let Some(c) = schema.by_id(collection_id).cloned() else {
            return Ok(None);
        };
        let row = self
            .store
            .read(|conn| crate::store::records::get(conn, &c, record_id, None))
            .await?;
        Ok(row.map(|row| {
            c.fields
                .iter()
                .zip(row)
                .filter(|(f, _)| f.kind == crate::schema::FieldType::File)
                .flat_map(|(f, v)| {
                    crate::schema::value::to_list(&crate::schema::value::from_stored(f, v))
                })
                .collect()
        }))
    }

    /// The plugins' auth hooks on a sign-in about to succeed (`method`: "password", "otp",
    /// "oauth2", "refresh"), in plugin-name order, before its token: the notes they add to the
    /// answer's `meta`, or the first refusal. A plugin that fails refuses the sign-in.
    pub(crate) async fn auth_hooks(
        &self,
        access: &Access<'_>,
        c: &crate::schema::Collection,
        row: &crate::store::StoreRecord,
        method: &str,
        provider: Option<&str>,
    ) -> Result<Vec<(String, String)>> {
        let registry = self.plugins.registry();
        let hooks = registry.auth_hooks(&c.id);
        if hooks.is_empty() {
            return Ok(Vec::new());
        }
        let facts = Arc::new(access.facts());
        let record = crate::plugins::PluginRecord::from_stored(c, row);
        let mut notes = Vec::new();
        for h in hooks {
            match h
                .authenticate(Arc::clone(&facts), method, &record, provider)
                .await
            {
                AuthOutcome::Proceed(n) => notes.extend(n),
                AuthOutcome::Rejected(r) => return Err(RecordError::Rejected(r)),
                AuthOutcome::Failed(e) => {
                    tracing::warn!(error = %e, "plugin auth hook failed; sign-in refused");
                    return Err(RecordError::Refused(MSG_AUTH_FAILED));
                }
            }
        }
        Ok(notes)
    }
}

impl RecordError {
    pub(crate) fn invalid(message: &'static str, data: Map<String, Value>) -> Self {
        Self::Invalid { message, data }
    }
}

pub(crate) type Result<T> = std::result::Result<T, RecordError>;

#[cfg(test)]
mod tests;
