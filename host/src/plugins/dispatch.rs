//! Running hooks where they run: the in-transaction chain where the write runs (the writer
//! thread, or a batch's worker) and the after-commit dispatcher task.

use super::calls::{Action, Change, HookOutcome};
use super::convert::PluginRecord;
use super::host::{TxAnswer, TxOp};
use super::instance::Loaded;
use super::{CallFacts, Plugins};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Run the in-transaction hooks of one write where it runs (the writer thread, or the worker of
/// a batch holding the lent connection), with their raw SQL served on
/// the write's own connection (`db.query` sees the pending write, `db.execute` joins it). The
/// first rejection or failure stops the chain.
pub(crate) fn run_in_transaction(
    hooks: &[Arc<Loaded>],
    facts: Arc<CallFacts>,
    action: Action,
    record: &PluginRecord,
    conn: crate::store::Conn<'_>,
) -> HookOutcome {
    let Some(first) = hooks.first() else {
        return HookOutcome::Proceed(Vec::new());
    };
    let handle = first.rt.handle.clone();
    let (tx, mut rx) = mpsc::unbounded_channel::<TxOp>();
    let calls = async move {
        for h in hooks {
            match h
                .in_transaction(Arc::clone(&facts), action, record, tx.clone())
                .await
            {
                HookOutcome::Proceed(_) => {}
                other => return other,
            }
        }
        HookOutcome::Proceed(Vec::new())
    };
    let serve = async {
        while let Some(op) = rx.recv().await {
            let r = if op.write {
                crate::store::raw::execute(conn, op.policy, op.budget, &op.sql, &op.params)
                    .map(TxAnswer::Changed)
            } else {
                crate::store::raw::query(conn, op.policy, op.budget, &op.sql, &op.params)
                    .map(TxAnswer::Rows)
            };
            let _ = op.reply.send(r);
        }
    };
    let run = move || {
        handle.block_on(async move {
            let (out, ()) = tokio::join!(calls, serve);
            out
        })
    };
    // On the writer thread, or on a runtime worker holding a lent transaction (a batch): a
    // worker must first hand its other tasks on.
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(run)
        }
        _ => run(),
    }
}

/// Deliver committed changes to after-commit hooks: one task, so every plugin sees them in
/// commit order; whatever queued meanwhile goes in one call.
pub(crate) fn spawn_commit_dispatcher(plugins: Arc<Plugins>) {
    let Some(mut rx) = plugins.rt.commits_rx.lock().ok().and_then(|mut r| r.take()) else {
        return;
    };
    tokio::spawn(async move {
        while let Some(mut batch) = rx.recv().await {
            while batch.len() < 256 {
                match rx.try_recv() {
                    Ok(more) => batch.extend(more),
                    Err(_) => break,
                }
            }
            let reg = plugins.registry();
            let mut by_plugin: Vec<(Arc<Loaded>, Vec<Change>)> = Vec::new();
            for c in batch {
                let Some(slots) = reg.hooks(&c.collection_id) else {
                    continue;
                };
                for h in &slots.after_commit {
                    match by_plugin.iter_mut().find(|(p, _)| Arc::ptr_eq(p, h)) {
                        Some((_, v)) => v.push(c.clone()),
                        None => by_plugin.push((Arc::clone(h), vec![c.clone()])),
                    }
                }
            }
            for (p, changes) in by_plugin {
                if let Err(e) = p.after_commit(&changes).await {
                    tracing::warn!(plugin = %p.name(), error = %e, changes = changes.len(), "after-commit hook failed");
                }
            }
        }
    });
}
