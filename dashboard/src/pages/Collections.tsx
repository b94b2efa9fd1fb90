import type { CollectionModel } from "pocketbase";
import { useState } from "preact/hooks";
import { Loading, EmptyState, link, navigate } from "../ui";
import { useCollections } from "../collectionsStore";
import { currentPath } from "../router";
import { RecordsView } from "../records/RecordsView";
import { CollectionEditor } from "./CollectionEditor";
import { useAppSettings } from "../appSettings";

/** Open the collection editor for `c` (used by the records view's "edit collection" button). */
export function openCollectionEditor(c: CollectionModel | { id: string }) {
  navigate(`/collections/${encodeURIComponent(c.id)}/edit`);
}

export function TypeDot(p: { type: string }) {
  const t = p.type === "auth" ? "A" : p.type === "view" ? "V" : "B";
  return <span class={`type-dot type-${p.type}`} title={`${p.type} collection`} aria-hidden="true">{t}</span>;
}

function CollectionsNav(props: { active?: string }) {
  const { collections, loaded } = useCollections();
  const [q, setQ] = useState("");
  const [showSystem, setShowSystem] = useState(false);
  const { hideControls } = useAppSettings();
  const match = (c: CollectionModel) => c.name.toLowerCase().includes(q.trim().toLowerCase());
  const user = collections.filter((c) => !c.system && match(c));
  const system = collections.filter((c) => c.system && match(c));
  const item = (c: CollectionModel) => (
    <li>
      <a href={link(`/collections/${encodeURIComponent(c.id)}`)} class={props.active === c.id ? "active" : ""} aria-current={props.active === c.id ? "page" : undefined} data-testid="collection-link">
        <TypeDot type={c.type} /><span class="name">{c.name}</span>
      </a>
    </li>
  );
  return (
    <nav class="subnav" aria-label="Collections">
      <div class="subnav-head">
        <h2>Collections</h2>
        <label class="sr-only" for="coll-search">Search collections</label>
        <input id="coll-search" class="input" type="search" placeholder="Search collections…" value={q} onInput={(e) => setQ((e.target as HTMLInputElement).value)} />
      </div>
      {!loaded ? <Loading /> : (
        <ul class="subnav-list">
          {user.map(item)}
          {!user.length && <li class="muted small" style="padding:8px 10px">{q ? "No matching collections." : "No collections yet."}</li>}
          {(system.length > 0) && (
            <>
              <li><button class="subnav-group btn-link" style="text-decoration:none" aria-expanded={showSystem || !!q} onClick={() => setShowSystem(!showSystem)}>{showSystem || q ? "▾" : "▸"} System</button></li>
              {(showSystem || q) && system.map(item)}
            </>
          )}
        </ul>
      )}
      <div class="subnav-foot">
        {!hideControls && <a class="btn btn-primary btn-block" href={link("/collections/new")} data-testid="new-collection">+ New collection</a>}
        <div class="row">
          <a class="btn btn-sm btn-ghost" style="flex:1" href={link("/settings/import")}>Import</a>
          <a class="btn btn-sm btn-ghost" style="flex:1" href={link("/settings/export")}>Export</a>
        </div>
      </div>
    </nav>
  );
}

export function CollectionsPage(props: { path: string[] }) {
  const { collections, loaded } = useCollections();
  const [idOrName, action] = props.path;
  const isNew = idOrName === "new";
  const current = !isNew && idOrName ? collections.find((c) => c.id === idOrName || c.name === idOrName) : undefined;
  const first = collections.find((c) => !c.system);
  if (loaded && !idOrName && first)
    setTimeout(() => {
      // only if still on the bare list (the user may have gone on meanwhile)
      if (currentPath().join("/") === "collections") navigate(`/collections/${encodeURIComponent(first.id)}`, true);
    });

  let body;
  if (!loaded) body = <Loading />;
  else if (current) body = <RecordsView key={current.id} collection={current} />;
  else if (idOrName && !isNew) body = <EmptyState title="Collection not found">It may have been deleted or renamed.</EmptyState>;
  else if (isNew && first) body = null;
  else body = (
    <EmptyState title="Create your first collection" action={<a class="btn btn-primary" href={link("/collections/new")}>+ New collection</a>}>
      Collections hold your records. Start with a base collection, an auth collection for users, or a view over a SQL query.
    </EmptyState>
  );

  return (
    <div class="page">
      <CollectionsNav active={current?.id} />
      <main class="main" id="main" tabIndex={-1}>
        {body}
      </main>
      {isNew && <CollectionEditor key="new" onClose={() => navigate("/collections")} />}
      {current && action === "edit" && <CollectionEditor key={current.id} collection={current} onClose={() => navigate(`/collections/${encodeURIComponent(current.id)}`)} />}
    </div>
  );
}
