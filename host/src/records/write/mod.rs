//! Record writes: create, update and delete, with rules, validation, plugin hooks and the
//! change feed, in PocketBase's order. REST and plugins' record calls share this one path.
//!
//! A write is prepared off the writer (draft, before-hooks, validation, password hashing), then
//! applied in one savepoint on the writer ([`Prepared::apply`]): relation ids checked, the row
//! written and read back under the create rule, in-transaction hooks run. A writer bound to a
//! batch's transaction ([`super::batch`]) reads and writes through that transaction instead, so
//! each write sees the ones before it and all commit together.

mod draft;

use super::feed::Committed;
use super::{
    Access, Action as RuleAction, MSG_CREATE_FAILED, MSG_DELETE_FAILED, MSG_TRUNCATE_FAILED,
    MSG_UPDATE_FAILED, RecordError, Records, Result,
};
use crate::files::Upload;
use crate::plugins::{
    Action, CallFacts, HookOutcome, HookSlots, Loaded, PluginRecord, Rejection, run_in_transaction,
};
use crate::query::Select;
use crate::schema::Collection;
use crate::schema::define::verr;
use crate::schema::value::Stored;
use crate::store::records::Cascaded;
use crate::store::{
    Announce, Conn, Keep, OnCommit, StoreError, StoreRecord, Tx, records as store_records,
};
use draft::{Draft, RelationChecks};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::sync::Arc;

/// How a write ended on the writer.
pub(crate) enum WriteOutcome {
    Done(StoreRecord),
    /// A delete: the record as it was, and what its relations did to other records.
    Deleted(StoreRecord, Vec<Cascaded>),
    RuleFailed,
    /// Relation fields whose ids were not found.
    MissingRelations(Vec<String>),
    /// An in-transaction hook refused; the write was rolled back.
    Rejected(Rejection),
    /// An in-transaction hook failed; the write was rolled back.
    HookFailed(String),
}

/// Writes made with one access (a request, or the server itself), each in its own transaction
/// or all in a batch's.
pub(crate) struct Writer<'a> {
    records: &'a Records,
    access: &'a Access<'a>,
    tx: Option<&'a Tx>,
}

/// Views are read-only.
fn writable(c: &Collection) -> Result<()> {
    if c.is_view() {
        return Err(RecordError::Refused("Unsupported collection type."));
    }
    Ok(())
}

/// The in-transaction hooks of one write and the facts they run with.
struct InTx {
    hooks: Vec<Arc<Loaded>>,
    facts: Arc<CallFacts>,
}

impl InTx {
    /// Run them inside the write's savepoint: None to go on, else the outcome that ends the
    /// write (rolled back).
    fn run(&self, action: Action, rec: &PluginRecord, conn: Conn<'_>) -> Option<WriteOutcome> {
        match run_in_transaction(&self.hooks, Arc::clone(&self.facts), action, rec, conn) {
            HookOutcome::Proceed(_) => None,
            HookOutcome::Rejected(r) => Some(WriteOutcome::Rejected(r)),
            HookOutcome::Failed(e) => Some(WriteOutcome::HookFailed(e)),
        }
    }
}

/// The error for a write that did not happen, for the outcomes create, update and delete share.
fn refused(outcome: WriteOutcome, message: &'static str) -> RecordError {
    match outcome {
        WriteOutcome::MissingRelations(names) => {
            RecordError::invalid(message, draft::missing_relation_errors(names))
        }
        WriteOutcome::Rejected(r) => RecordError::Rejected(r),
        WriteOutcome::HookFailed(e) => hook_failed(message, &e),
        WriteOutcome::RuleFailed | WriteOutcome::Done(_) | WriteOutcome::Deleted(..) => {
            RecordError::NotFound
        }
    }
}

fn hook_failed(message: &'static str, why: &str) -> RecordError {
    tracing::warn!(error = %why, "plugin hook failed; write refused");
    RecordError::Refused(message)
}

/// A store refusal of a create or update, in PocketBase's field errors.
fn save_error(e: StoreError, message: &'static str) -> RecordError {
    match e {
        StoreError::NotUnique(cols) => draft::unique_error(message, cols),
        StoreError::AuthIdTaken => {
            let mut data = Map::new();
            data.insert(
                "id".into(),
                verr(
                    "validation_invalid_auth_id",
                    "Invalid or duplicated auth record id.",
                ),
            );
            RecordError::invalid(message, data)
        }
        other => RecordError::Store(other),
    }
}

/// A create or update ready for the writer: everything that needs no transaction is done.
pub(crate) struct Prepared {
    collection: Arc<Collection>,
    action: Action,
    id: String,
    row: Vec<(usize, Stored)>,
    checks: RelationChecks,
    /// The create rule, checked against the written row (None: no rule to check).
    rule: Option<Select>,
    in_tx: Option<InTx>,
}

impl Prepared {
    /// On the writer, in one savepoint: relation ids checked, the row written and read back
    /// under the rule, in-transaction hooks run. Anything but `Done` leaves nothing behind.
    pub(crate) fn apply(
        self,
        conn: Conn<'_>,
        schema: &crate::schema::Schema,
    ) -> crate::store::Result<WriteOutcome> {
        let c = &self.collection;
        let missing = draft::missing_relations(conn, &self.checks)?;
        if !missing.is_empty() {
            // PocketBase decides a create rule before it validates: a rule that fails is the
            // answer even when relations are missing too.
            if self.action == Action::Create
                && let Some(rule) = &self.rule
                && !rule_admits(conn, schema, c, &self.id, &self.row, rule)?
            {
                return Ok(WriteOutcome::RuleFailed);
            }
            return Ok(WriteOutcome::MissingRelations(missing));
        }
        conn.savepoint(|tx| {
            let saved = if self.action == Action::Create && self.rule.is_none() {
                // No rule to look through: the insert itself answers the stored row.
                Some(store_records::insert_returning(tx, schema, c, &self.row)?)
            } else {
                if self.action == Action::Create {
                    store_records::insert(tx, schema, c, &self.row)?;
                } else {
                    store_records::update(tx, c, &self.id, &self.row)?;
                }
                // PocketBase checks a create rule against the would-be record: insert, look,
                // and roll back when the rule does not hold.
                store_records::get(tx, c, &self.id, self.rule.as_ref())?
            };
            let Some(saved) = saved else {
                return Ok(Keep::Rollback(WriteOutcome::RuleFailed));
            };
            if let Some(hooks) = self.in_tx
                && let Some(stop) =
                    hooks.run(self.action, &PluginRecord::from_stored(c, &saved), tx)
            {
                return Ok(Keep::Rollback(stop));
            }
            Ok(Keep::Commit(WriteOutcome::Done(saved)))
        })
    }
}

/// The changes a committed delete of `gone` announces, onto `out`: its relations' work first
/// (PocketBase deletes or unlinks the referencing records before the record itself), then the
/// record as it was.
fn delete_changes(
    c: &Arc<Collection>,
    gone: &StoreRecord,
    cascaded: &[Cascaded],
    actor: &Option<crate::plugins::Principal>,
    out: &mut Vec<Committed>,
) {
    let change = |action, collection, record, previous| Committed {
        seq: 0,
        action,
        collection,
        record,
        previous,
        actor: actor.clone(),
    };
    for k in cascaded {
        out.push(match k {
            Cascaded::Deleted(oc, row) => change(Action::Delete, Arc::clone(oc), row.clone(), None),
            Cascaded::Updated(oc, after, before) => change(
                Action::Update,
                Arc::clone(oc),
                after.clone(),
                Some(before.clone()),
            ),
        });
    }
    out.push(change(Action::Delete, Arc::clone(c), gone.clone(), None));
}

/// The file folders of the records a delete's cascade deleted, onto `out` (removed once the
/// delete committed).
fn cascaded_folders(cascaded: &[Cascaded], out: &mut Vec<(String, String)>) {
    for k in cascaded {
        if let Cascaded::Deleted(oc, row) = k
            && oc.has_files()
            && let Some(Stored::Text(rid)) = draft::idx(oc, "id").and_then(|i| row.get(i))
        {
            out.push((oc.id.clone(), rid.to_owned()));
        }
    }
}

/// How a truncate ended on the writer.
enum Truncated {
    /// Every record deleted. `gone`: each as it was with its cascade's trail, when the feed
    /// wants them; `folders`: the file folders to remove.
    Done {
        gone: Vec<(StoreRecord, Vec<Cascaded>)>,
        folders: Vec<(String, String)>,
    },
    /// A record the before-delete hooks were not asked about: nothing was deleted.
    Unasked,
    /// An in-transaction hook stopped it: rolled back.
    Stopped(WriteOutcome),
}

/// How many times a truncate reads the records again for its before-delete hooks when new
/// ones keep appearing before it gives up.
const TRUNCATE_ROUNDS: usize = 8;

/// Whether a write is a delete, and whether its cascade can reach records with files.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Deleting {
    No,
    Yes,
    CascadingIntoFiles,
}

/// Whether a delete's cascades are worth recording: someone may want them.
fn notice_wanted(feed: &super::feed::Feed, c: &Collection) -> bool {
    feed.active() || feed.wants(c)
}

/// Whether `rule` admits the would-be record `row`: written in a savepoint, looked at, rolled
/// back. A row the table refuses (a unique value taken, say) counts as admitted: its own error
/// is the answer then.
fn rule_admits(
    conn: Conn<'_>,
    schema: &crate::schema::Schema,
    c: &Arc<Collection>,
    id: &str,
    row: &[(usize, Stored)],
    rule: &Select,
) -> crate::store::Result<bool> {
    conn.savepoint(|tx| {
        if store_records::insert(tx, schema, c, row).is_err() {
            return Ok(Keep::Rollback(true));
        }
        let seen = store_records::get(tx, c, id, Some(rule))?.is_some();
        Ok(Keep::Rollback(seen))
    })
}

impl<'a> Writer<'a> {
    pub(crate) fn new(records: &'a Records, access: &'a Access<'a>) -> Self {
        Self {
            records,
            access,
            tx: None,
        }
    }

    /// A writer whose reads and writes run in `tx` (a batch's transaction).
    pub(super) fn batched(records: &'a Records, access: &'a Access<'a>, tx: &'a Tx) -> Self {
        Self {
            records,
            access,
            tx: Some(tx),
        }
    }

    /// One record as this writer sees it: the committed state, or the batch's so far.
    async fn find(
        &self,
        c: &Arc<Collection>,
        id: &str,
        rule: Option<&Select>,
    ) -> Result<Option<StoreRecord>> {
        Ok(match self.tx {
            None => {
                self.records
                    .store
                    .read(|conn| store_records::get(conn, c, id, rule))
                    .await?
            }
            Some(tx) => {
                let (c, id, rule) = (Arc::clone(c), id.to_owned(), rule.cloned());
                tx.run(move |conn| store_records::get(conn, &c, &id, rule.as_ref()))
                    .await?
            }
        })
    }

    /// Whether this caller manages the record (the auth collection's `manageRule`, see
    /// [`super::manage_rule`]): `stored` names an existing record (an update), otherwise `row` is
    /// the would-be record of a create, checked in place of the table as PocketBase checks its
    /// dummy record (with `verified` false, so a rule that reads it cannot be satisfied by the
    /// very value it guards). A rule that does not compile, or a failed read, grants nothing.
    async fn manages(
        &self,
        c: &Arc<Collection>,
        access: &Access<'_>,
        stored: Option<&str>,
        row: Vec<Stored>,
    ) -> bool {
        let Some(rule) = super::manage_rule(c, access) else {
            return false;
        };
        let schema = self.records.store.schema();
        if let Some(id) = stored {
            let Ok(sel) = crate::query::compile_rule(&schema, c, rule, access.info()) else {
                return false;
            };
            return matches!(self.find(c, id, Some(&sel)).await, Ok(Some(_)));
        }
        let standin = Arc::new(super::watch::event_collection(c));
        let Ok(sel) = crate::query::compile_rule(&schema, &standin, rule, access.info()) else {
            return false;
        };
        let check = move |conn: Conn<'_>| store_records::row_matches(conn, &standin, &row, &sel);
        let found = match self.tx {
            None => self.records.store.read(check).await,
            Some(tx) => tx.run(check).await,
        };
        found.unwrap_or(false)
    }

    /// Relation ids of `checks` that do not exist, as this writer sees them.
    async fn missing(&self, checks: RelationChecks) -> Vec<String> {
        let found = match self.tx {
            None => {
                self.records
                    .store
                    .read(move |conn| draft::missing_relations(conn, &checks))
                    .await
            }
            Some(tx) => {
                tx.run(move |conn| draft::missing_relations(conn, &checks))
                    .await
            }
        };
        found.unwrap_or_default()
    }

    /// Run a write on the writer: in its own (group) commit, or as a step of the batch's
    /// transaction. `notify` is announced after the commit that makes it durable.
    async fn commit_write<R, F>(&self, f: F, notify: Option<OnCommit<R>>) -> crate::store::Result<R>
    where
        F: FnOnce(Conn<'_>) -> crate::store::Result<R> + Send + 'static,
        R: Send + 'static,
    {
        match self.tx {
            None => self.records.store.write_then(f, notify).await,
            Some(tx) => tx.run_then(f, notify).await,
        }
    }

    /// Field errors of a draft, relation ids included; on success, the relation ids the write
    /// checks on its own connection.
    async fn validate(
        &self,
        c: &Arc<Collection>,
        draft: &Draft,
        skip: &[usize],
        message: &'static str,
    ) -> Result<RelationChecks> {
        let (mut errors, checks) = draft::validate(&self.records.store.schema(), c, draft, skip);
        if errors.is_empty() {
            return Ok(checks);
        }
        // The write will not happen: report the relation errors along with the others now.
        if !checks.is_empty() {
            errors.extend(draft::missing_relation_errors(self.missing(checks).await));
        }
        Err(RecordError::invalid(message, errors))
    }

    fn facts(&self) -> Arc<CallFacts> {
        Arc::new(self.access.facts())
    }

    /// The in-transaction hooks `slots` holds, if any.
    fn in_tx(&self, slots: Option<&HookSlots>) -> Option<InTx> {
        let hooks = slots?.in_transaction.clone();
        (!hooks.is_empty()).then(|| InTx {
            hooks,
            facts: self.facts(),
        })
    }

    /// What to announce once the write committed: the change, numbered in commit order, for
    /// the feed's listeners (after-commit hooks, realtime). None (no cost) when none of them
    /// wants this collection.
    fn commit_notice(
        &self,
        c: &Arc<Collection>,
        action: Action,
        previous: Option<StoreRecord>,
    ) -> Option<OnCommit<WriteOutcome>> {
        let feed = Arc::clone(&self.records.feed);
        // A delete's cascades may reach collections a listener wants even when this one is not.
        if !(feed.wants(c) || (action == Action::Delete && feed.active())) {
            return None;
        }
        let c = Arc::clone(c);
        let actor = self.access.who.map(super::Caller::principal);
        Some(Box::new(move |out: &WriteOutcome| {
            let changes: Vec<Committed> = match out {
                WriteOutcome::Done(saved) => vec![Committed {
                    seq: 0,
                    action,
                    collection: c,
                    record: saved.clone(),
                    previous,
                    actor,
                }],
                WriteOutcome::Deleted(gone, cascaded) => {
                    let mut all = Vec::with_capacity(cascaded.len() + 1);
                    delete_changes(&c, gone, cascaded, &actor, &mut all);
                    all
                }
                _ => return None,
            };
            Some(Box::new(move || {
                for ch in changes {
                    feed.publish(ch);
                }
            }) as Announce)
        }))
    }

    /// `notify`, with the write's file work done first once it committed: uploads placed,
    /// dropped files deleted, the folders of deleted records (cascades included) removed. A
    /// write that does not commit drops `pending`, which deletes its temporary files. The work
    /// is noted in the files area before the write is queued (see `files::Intent`), so a crash
    /// after the COMMIT and before the work is finished by the next start.
    fn with_files(
        &self,
        notify: Option<OnCommit<WriteOutcome>>,
        c: &Arc<Collection>,
        id: &str,
        pending: draft::Pending,
        dropped: Vec<String>,
        deleting: Deleting,
    ) -> Option<OnCommit<WriteOutcome>> {
        let folder = deleting != Deleting::No && c.has_files();
        // Nothing to place or drop: only a delete of a record that can have files, or whose
        // cascade can reach such records, has work.
        if pending.is_empty()
            && dropped.is_empty()
            && !folder
            && deleting != Deleting::CascadingIntoFiles
        {
            return notify;
        }
        let files = Arc::clone(&self.records.files);
        let (cid, id) = (c.id.clone(), id.to_owned());
        let intent = files.intend(&cid, &id, &pending, &dropped, folder);
        Some(Box::new(move |out: &WriteOutcome| {
            let inner = notify.and_then(|n| n(out));
            let mut folders: Vec<(String, String)> = Vec::new();
            match out {
                WriteOutcome::Done(_) => {}
                WriteOutcome::Deleted(_, cascaded) => {
                    if folder {
                        folders.push((cid.clone(), id.clone()));
                    }
                    cascaded_folders(cascaded, &mut folders);
                }
                _ => return inner,
            }
            Some(Box::new(move || {
                files.apply(crate::files::FileWork {
                    collection_id: cid,
                    record_id: id,
                    place: pending,
                    delete: dropped,
                    folders,
                    intent,
                });
                if let Some(a) = inner {
                    a();
                }
            }) as Announce)
        }))
    }

    /// Run the before-hooks of one event in order; patches apply cumulatively.
    async fn before(
        &self,
        hooks: &[Arc<Loaded>],
        c: &Collection,
        current: Option<&PluginRecord>,
        draft: &mut Draft,
        uploads: &draft::Pending,
        message: &'static str,
    ) -> Result<()> {
        let facts = self.facts();
        for h in hooks {
            let pending = PluginRecord::from_json(c, &draft.values);
            let facts = if uploads.is_empty() {
                Arc::clone(&facts)
            } else {
                // Each hook sees the uploads the draft still holds (a patch may drop some).
                Arc::new(CallFacts {
                    uploads: draft::uploads_for_hooks(c, draft, uploads),
                    ..(*facts).clone()
                })
            };
            match h.before_write(facts, current, &pending).await {
                HookOutcome::Proceed(patch) => {
                    draft::apply_patch(c, draft, patch).map_err(|e| hook_failed(message, &e))?
                }
                HookOutcome::Rejected(r) => return Err(RecordError::Rejected(r)),
                HookOutcome::Failed(e) => return Err(hook_failed(message, &e)),
            }
        }
        Ok(())
    }

    /// Apply a prepared create or update on the writer, and queue its change for after-commit
    /// hooks once it committed.
    async fn save(
        &self,
        prepared: Prepared,
        notify: Option<OnCommit<WriteOutcome>>,
    ) -> Result<StoreRecord> {
        let (action, message) = match prepared.action {
            Action::Create => (Action::Create, MSG_CREATE_FAILED),
            other => (other, MSG_UPDATE_FAILED),
        };
        let store = Arc::clone(&self.records.store);
        let outcome = self
            // The schema as of this job (schema changes run alone on the writer).
            .commit_write(move |conn| prepared.apply(conn, &store.schema()), notify)
            .await
            .map_err(|e| save_error(e, message))?;
        match outcome {
            WriteOutcome::Done(saved) => Ok(saved),
            WriteOutcome::RuleFailed if action == Action::Create => {
                Err(RecordError::Refused(MSG_CREATE_FAILED))
            }
            other => Err(refused(other, message)),
        }
    }

    /// Create a record from body-shaped `data`: PocketBase's create, with plugin hooks.
    pub(crate) async fn create(
        &self,
        c: &Arc<Collection>,
        data: &Map<String, Value>,
    ) -> Result<StoreRecord> {
        self.create_with(c, data, Vec::new(), &[]).await
    }

    /// [`Self::create`] with uploads by body key (`field`, `field+`, `+field`); they are
    /// placed once the record is committed, and dropped (temp files deleted) otherwise.
    /// `not_utf8` names the body keys whose form bytes were not UTF-8.
    pub(crate) async fn create_with(
        &self,
        c: &Arc<Collection>,
        data: &Map<String, Value>,
        uploads: Vec<(String, Upload)>,
        not_utf8: &[String],
    ) -> Result<StoreRecord> {
        writable(c)?;
        let superuser = self.access.is_superuser();
        let mut draft = Draft::new_record(c, data, superuser);
        draft::refuse_not_utf8_json(c, &mut draft, data, not_utf8, superuser);
        let id_idx = draft::fill_new(c, &mut draft, data)?;
        if !superuser && c.rules.create.is_some() && draft::unhashable_password(c, data) {
            return Err(RecordError::Refused(MSG_CREATE_FAILED));
        }
        let mut pending = draft::attach_uploads(c, &mut draft, data, uploads);
        let skip = if c.is_auth() {
            // A manager may create a record already verified, as a superuser may.
            let manager = !superuser
                && c.rules.create.is_some()
                && self
                    .manages(
                        c,
                        &self.access.with_body(data),
                        None,
                        draft::would_be_row(c, &draft),
                    )
                    .await;
            draft::auth_create_checks(c, superuser || manager, data, &mut draft)?
        } else {
            Vec::new()
        };
        // Plugins: one registry snapshot for the whole write. Before-hooks see the coerced
        // input and their patches are validated with it (PocketBase's model hooks run before
        // validation too).
        let reg = self.records.plugins.registry();
        let slots = reg.hooks(&c.id);
        if let Some(s) = slots
            && !s.before_create.is_empty()
        {
            self.before(
                &s.before_create,
                c,
                None,
                &mut draft,
                &pending,
                MSG_CREATE_FAILED,
            )
            .await?;
            draft::keep_attached(c, &draft, &mut pending);
        }
        let with_body = self.access.with_body(data);
        let rule = super::condition(
            &self.records.store.schema(),
            c,
            RuleAction::Create,
            &with_body,
        )?;
        let id = draft.values[id_idx].as_str().unwrap_or("").to_owned();
        let checks = match self.validate(c, &draft, &skip, MSG_CREATE_FAILED).await {
            Ok(checks) => checks,
            // PocketBase checks the create rule before it validates: when the rule refuses,
            // that is the answer, whatever the field errors. (Only this error path pays for
            // the look; a valid create checks its rule on the row it writes.)
            Err(invalid) => {
                if let Some(rule) = rule {
                    let (c2, row, store) = (
                        Arc::clone(c),
                        draft::to_row(c, &draft, None),
                        Arc::clone(&self.records.store),
                    );
                    let id = id.clone();
                    let admitted = self
                        .commit_write(
                            move |conn| rule_admits(conn, &store.schema(), &c2, &id, &row, &rule),
                            None,
                        )
                        .await?;
                    if !admitted {
                        return Err(RecordError::Refused(MSG_CREATE_FAILED));
                    }
                }
                return Err(invalid);
            }
        };
        draft::hash_passwords(c, &mut draft).await?;
        let prepared = Prepared {
            collection: Arc::clone(c),
            action: Action::Create,
            id,
            row: draft::to_row(c, &draft, None),
            checks,
            rule,
            in_tx: self.in_tx(slots),
        };
        let notify = self.commit_notice(c, Action::Create, None);
        let notify = self.with_files(notify, c, &prepared.id, pending, Vec::new(), Deleting::No);
        let id = prepared.id.clone();
        let saved = self.save(prepared, notify).await;
        self.settle_files(c, &id).await;
        saved
    }

    /// Update a record from body-shaped `data`, with plugin hooks. The record must pass the
    /// caller's update rule.
    pub(crate) async fn update(
        &self,
        c: &Arc<Collection>,
        id: String,
        data: &Map<String, Value>,
    ) -> Result<StoreRecord> {
        self.update_with(c, id, data, Vec::new(), &[]).await
    }

    /// [`Self::update`] with uploads (see [`Self::create_with`]); files the update drops are
    /// deleted after its commit.
    pub(crate) async fn update_with(
        &self,
        c: &Arc<Collection>,
        id: String,
        data: &Map<String, Value>,
        uploads: Vec<(String, Upload)>,
        not_utf8: &[String],
    ) -> Result<StoreRecord> {
        writable(c)?;
        let superuser = self.access.is_superuser();
        let with_body = self.access.with_body(data);
        let rule = super::condition(
            &self.records.store.schema(),
            c,
            RuleAction::Update,
            &with_body,
        )?;
        let existing = self
            .find(c, &id, rule.as_ref())
            .await?
            .ok_or(RecordError::NotFound)?;

        let (mut draft, before) = Draft::existing(c, &existing, data, superuser);
        draft::refuse_not_utf8_json(c, &mut draft, data, not_utf8, superuser);
        let mut pending = draft::attach_uploads(c, &mut draft, data, uploads);
        let reg = self.records.plugins.registry();
        let slots = reg.hooks(&c.id);
        let previous = slots.map(|_| PluginRecord::from_stored(c, &existing));
        let wanted = self.records.feed.wants(c).then(|| existing.clone());
        if let Some(s) = slots
            && !s.before_update.is_empty()
        {
            self.before(
                &s.before_update,
                c,
                previous.as_ref(),
                &mut draft,
                &pending,
                MSG_UPDATE_FAILED,
            )
            .await?;
            draft::keep_attached(c, &draft, &mut pending);
        }
        let mut errors = Map::new();
        // Any `id` in an update body that is not the record's own (null and "" included) is an
        // attempt to change the primary key, as PocketBase sees it: an error of the id field,
        // reported with the other fields' errors.
        if let Some(new_id) = data.get("id")
            && new_id.as_str() != Some(id.as_str())
        {
            draft.input_errors.push((
                draft::field_index(c, "id")?,
                verr(
                    "validation_pk_change",
                    "The record primary key cannot be changed.",
                ),
            ));
        }
        let mut changed: Vec<usize> = (0..c.fields.len())
            .filter(|&i| draft.values[i] != before[i])
            .collect();
        let now = crate::schema::ids::now();
        for (i, f) in c.fields.iter().enumerate() {
            if f.kind == crate::schema::FieldType::Autodate && f.opt_bool("onUpdate") {
                draft.values[i] = serde_json::json!(now);
                changed.push(i);
            }
        }
        if c.is_auth() {
            // A manager changes email, verified and the password (without the old one) as a
            // superuser does.
            let manager = !superuser
                && self
                    .manages(c, &with_body, Some(id.as_str()), Vec::new())
                    .await;
            draft::auth_update_checks(
                c,
                superuser || manager,
                data,
                &mut draft,
                &before,
                &mut changed,
                &mut errors,
            )
            .await?;
        }
        if !errors.is_empty() {
            return Err(RecordError::invalid(MSG_UPDATE_FAILED, errors));
        }
        // Every field is validated, as PocketBase validates the whole record on update (a field
        // made required since the record was written fails until it is set), except a password
        // that is not changing and has a stored hash: its value is that hash. An empty one (the
        // field added since) is validated as empty, so a required password fails until it is set.
        // Only changed fields are written.
        let skip: Vec<usize> = (0..c.fields.len())
            .filter(|&i| {
                c.fields[i].kind == crate::schema::FieldType::Password
                    && !changed.contains(&i)
                    && draft.values[i].as_str().is_some_and(|h| !h.is_empty())
            })
            .collect();
        let checks = self.validate(c, &draft, &skip, MSG_UPDATE_FAILED).await?;
        draft::hash_passwords(c, &mut draft).await?;
        changed.sort_unstable();
        changed.dedup();
        let prepared = Prepared {
            collection: Arc::clone(c),
            action: Action::Update,
            row: draft::to_row(c, &draft, Some(&changed)),
            id,
            checks,
            // The update rule was checked when the record was read.
            rule: None,
            in_tx: self.in_tx(slots),
        };
        let notify = self.commit_notice(c, Action::Update, wanted);
        let dropped = draft::dropped_files(c, &before, &draft.values);
        let notify = self.with_files(notify, c, &prepared.id, pending, dropped, Deleting::No);
        let id = prepared.id.clone();
        let saved = self.save(prepared, notify).await;
        self.settle_files(c, &id).await;
        saved
    }

    /// A write on its own waits for its S3 file work before the client hears back (a batch
    /// waits for all of its writes' work after its commit, in `api/batch.rs`).
    async fn settle_files(&self, c: &Collection, id: &str) {
        if self.tx.is_none() {
            self.records.files.settle(&c.id, id).await;
        }
    }

    /// Delete a record, with plugin hooks. The record must pass the caller's delete rule.
    pub(crate) async fn delete(&self, c: &Arc<Collection>, id: String) -> Result<()> {
        writable(c)?;
        let schema = self.records.store.schema();
        let rule = super::condition(&schema, c, RuleAction::Delete, self.access)?;
        let reg = self.records.plugins.registry();
        let slots = reg.hooks(&c.id);
        // With hooks, the record is read first: before-delete sees it (and may refuse).
        let mut pre = None;
        if let Some(s) = slots {
            let current = self
                .find(c, &id, rule.as_ref())
                .await?
                .ok_or(RecordError::NotFound)?;
            let rec = PluginRecord::from_stored(c, &current);
            let facts = self.facts();
            for h in &s.before_delete {
                match h.before_delete(Arc::clone(&facts), &rec).await {
                    HookOutcome::Proceed(_) => {}
                    HookOutcome::Rejected(r) => return Err(RecordError::Rejected(r)),
                    HookOutcome::Failed(e) => return Err(hook_failed(MSG_DELETE_FAILED, &e)),
                }
            }
            pre = Some(rec);
        }
        let c2 = Arc::clone(c);
        let in_tx = self.in_tx(slots);
        // The cascade's trail names the deleted records whose folders go after the commit.
        let into_files = draft::cascades_into_files(&schema, c);
        let keep_trail = notice_wanted(&self.records.feed, c) || into_files;
        let notify = self.commit_notice(c, Action::Delete, None);
        let deleting = if into_files {
            Deleting::CascadingIntoFiles
        } else {
            Deleting::Yes
        };
        let notify = self.with_files(notify, c, &id, Vec::new(), Vec::new(), deleting);
        let deleted_id = id.clone();
        let outcome = self
            .commit_write(
                move |conn| {
                    conn.savepoint(|tx| {
                        let Some(current) = store_records::get(tx, &c2, &id, rule.as_ref())? else {
                            return Ok(Keep::Rollback(WriteOutcome::RuleFailed));
                        };
                        let mut trail = keep_trail.then(Vec::new);
                        store_records::delete(tx, &schema, &c2, &id, 0, trail.as_mut())?;
                        if let Some(hooks) = in_tx {
                            let rec =
                                pre.unwrap_or_else(|| PluginRecord::from_stored(&c2, &current));
                            if let Some(stop) = hooks.run(Action::Delete, &rec, tx) {
                                return Ok(Keep::Rollback(stop));
                            }
                        }
                        Ok(Keep::Commit(WriteOutcome::Deleted(
                            current,
                            trail.unwrap_or_default(),
                        )))
                    })
                },
                notify,
            )
            .await
            .map_err(|e| match e {
                StoreError::RequiredRelation => RecordError::Refused(MSG_DELETE_FAILED),
                other => RecordError::Store(other),
            })?;
        match outcome {
            WriteOutcome::Deleted(..) => {
                self.settle_files(c, &deleted_id).await;
                Ok(())
            }
            other => Err(refused(other, MSG_DELETE_FAILED)),
        }
    }

    /// Delete every record of `c` as PocketBase's truncate does: one by one in one
    /// transaction, each with its relations' cascades and its plugin hooks (before-delete on
    /// every record first, in-transaction after each delete; any refusal refuses the whole
    /// truncate), every delete announced to the feed once it all committed, the deleted
    /// records' files removed then. Superusers only: no rule applies.
    pub(crate) async fn truncate(&self, c: &Arc<Collection>) -> Result<()> {
        writable(c)?;
        let reg = self.records.plugins.registry();
        let slots = reg.hooks(&c.id);
        let before = slots.map_or(&[][..], |s| s.before_delete.as_slice());
        // Before-delete runs off the writer, on the records read then. Records created in the
        // meantime were not asked about: the writer sees them, deletes nothing, and the next
        // round asks about them.
        let mut asked: HashSet<String> = HashSet::new();
        for _ in 0..TRUNCATE_ROUNDS {
            if !before.is_empty() {
                self.ask_before_delete(c, before, &mut asked).await?;
            }
            let check = (!before.is_empty()).then(|| Arc::new(asked.clone()));
            match self.truncate_once(c, slots, check).await? {
                Truncated::Done { folders, .. } => {
                    if !folders.is_empty() {
                        let files = Arc::clone(&self.records.files);
                        let work = crate::files::FileWork {
                            folders,
                            ..Default::default()
                        };
                        let _ = tokio::task::spawn_blocking(move || files.apply(work)).await;
                        self.records.files.settle_all().await;
                    }
                    return Ok(());
                }
                Truncated::Unasked => continue,
                Truncated::Stopped(stop) => return Err(refused(stop, MSG_TRUNCATE_FAILED)),
            }
        }
        tracing::warn!(collection = %c.name, "truncate gave up: records kept being created");
        Err(RecordError::Refused(MSG_TRUNCATE_FAILED))
    }

    /// Run the before-delete hooks on every record of `c` not in `asked`, adding each.
    async fn ask_before_delete(
        &self,
        c: &Arc<Collection>,
        hooks: &[Arc<Loaded>],
        asked: &mut HashSet<String>,
    ) -> Result<()> {
        let rows = self
            .records
            .store
            .read(|conn| store_records::all(conn, c))
            .await?;
        let facts = self.facts();
        for row in rows {
            let id = c.stored_text(&row, "id").to_owned();
            if asked.contains(&id) {
                continue;
            }
            let rec = PluginRecord::from_stored(c, &row);
            for h in hooks {
                match h.before_delete(Arc::clone(&facts), &rec).await {
                    HookOutcome::Proceed(_) => {}
                    HookOutcome::Rejected(r) => return Err(RecordError::Rejected(r)),
                    HookOutcome::Failed(e) => return Err(hook_failed(MSG_TRUNCATE_FAILED, &e)),
                }
            }
            asked.insert(id);
        }
        Ok(())
    }

    /// One try at a truncate on the writer. With `asked`, a record not in it stops the try
    /// before anything is deleted.
    async fn truncate_once(
        &self,
        c: &Arc<Collection>,
        slots: Option<&HookSlots>,
        asked: Option<Arc<HashSet<String>>>,
    ) -> Result<Truncated> {
        let schema = self.records.store.schema();
        let in_tx = self.in_tx(slots);
        let feed = Arc::clone(&self.records.feed);
        let announce = notice_wanted(&feed, c);
        let into_files = draft::cascades_into_files(&schema, c);
        // Each record as it was is read when someone hears of it or a hook sees it.
        let whole = announce || in_tx.is_some();
        let actor = self.access.who.map(super::Caller::principal);
        let c2 = Arc::clone(c);
        // The deletes reach the feed right after the COMMIT, in order, as one delete's do.
        let notify: Option<OnCommit<Truncated>> = announce.then(|| {
            let c = Arc::clone(c);
            Box::new(move |out: &Truncated| {
                let Truncated::Done { gone, .. } = out else {
                    return None;
                };
                let mut changes = Vec::new();
                for (row, cascaded) in gone {
                    delete_changes(&c, row, cascaded, &actor, &mut changes);
                }
                Some(Box::new(move || {
                    for ch in changes {
                        feed.publish(ch);
                    }
                }) as Announce)
            }) as OnCommit<Truncated>
        });
        self.records
            .store
            .write_then(
                move |conn| {
                    conn.savepoint(|tx| {
                        let rows: Vec<(String, Option<StoreRecord>)> = if whole {
                            store_records::all(tx, &c2)?
                                .into_iter()
                                .map(|r| (c2.stored_text(&r, "id").to_owned(), Some(r)))
                                .collect()
                        } else {
                            store_records::all_ids(tx, &c2)
                                .map(|ids| ids.into_iter().map(|id| (id, None)).collect())?
                        };
                        if let Some(asked) = &asked
                            && rows.iter().any(|(id, _)| !asked.contains(id))
                        {
                            return Ok(Keep::Rollback(Truncated::Unasked));
                        }
                        let mut gone = Vec::new();
                        let mut folders = Vec::new();
                        for (id, row) in rows {
                            let mut trail = (announce || into_files).then(Vec::new);
                            store_records::delete(tx, &schema, &c2, &id, 0, trail.as_mut())?;
                            let trail = trail.unwrap_or_default();
                            cascaded_folders(&trail, &mut folders);
                            if c2.has_files() {
                                folders.push((c2.id.clone(), id));
                            }
                            if let (Some(hooks), Some(row)) = (&in_tx, &row) {
                                let rec = PluginRecord::from_stored(&c2, row);
                                if let Some(stop) = hooks.run(Action::Delete, &rec, tx) {
                                    return Ok(Keep::Rollback(Truncated::Stopped(stop)));
                                }
                            }
                            if announce && let Some(row) = row {
                                gone.push((row, trail));
                            }
                        }
                        Ok(Keep::Commit(Truncated::Done { gone, folders }))
                    })
                },
                notify,
            )
            .await
            .map_err(|e| match e {
                StoreError::RequiredRelation => RecordError::Refused(MSG_TRUNCATE_FAILED),
                other => RecordError::Store(other),
            })
    }
}
