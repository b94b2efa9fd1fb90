//! Many record writes in one transaction (PocketBase's batch). Each write is exactly its single
//! form (the rule gate with the batch caller's access, the draft, before-hooks, validation,
//! in-transaction hooks) run through the batch's transaction, so later writes see earlier
//! ones; all of them commit together or none does, and after-commit hooks and the change feed
//! hear of them only once that commit is durable.

use super::{Access, Records, Result, Writer};
use crate::schema::Collection;
use crate::store::{Tx, records as store_records};
use std::sync::Arc;

pub(crate) struct Batch<'r> {
    records: &'r Records,
    tx: Tx,
}

impl<'r> Batch<'r> {
    /// Open the batch's transaction (the writer serves nothing else until it ends: the caller
    /// bounds its life, and dropping the batch rolls it back).
    pub(crate) async fn begin(records: &'r Records) -> Result<Self> {
        let tx = records.store.begin().await?;
        Ok(Self { records, tx })
    }

    /// A writer for one request of the batch.
    pub(crate) fn writer<'a>(&'a self, access: &'a Access<'a>) -> Writer<'a>
    where
        'r: 'a,
    {
        Writer::batched(self.records, access, &self.tx)
    }

    /// Whether `id` exists in `c`, rules aside: an upsert updates when it does and creates
    /// otherwise, as PocketBase decides it.
    pub(crate) async fn exists(&self, c: &Arc<Collection>, id: &str) -> Result<bool> {
        let (c, id) = (Arc::clone(c), id.to_owned());
        Ok(self
            .tx
            .run(move |conn| store_records::get(conn, &c, &id, None))
            .await?
            .is_some())
    }

    /// Make every write durable; their after-commit hooks are queued before this returns.
    pub(crate) async fn commit(self) -> Result<()> {
        Ok(self.tx.commit().await?)
    }
}
