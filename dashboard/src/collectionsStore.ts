// The list of collections, shared by the sidebar, the editor and the records views.
// Loaded on first use, reloaded after the dashboard's own changes (reloadCollections), and
// refreshed when the window comes back into view, so collections another client or tab
// created, changed or deleted meanwhile show up.
import type { CollectionModel } from "pocketbase";
import { useEffect } from "preact/hooks";
import { useLive } from "./live";
import { pb } from "./pb";

let list: CollectionModel[] = [];
let loaded = false;
let loading: Promise<CollectionModel[]> | null = null;
let seq = 0; // requests started
let applied = 0; // the newest request whose answer is the list
const subs = new Set<(l: CollectionModel[]) => void>();

/** `next` with the objects of `prev` kept wherever a collection is unchanged, so views keyed
 * on a collection object do not reload for a refresh that changed nothing of theirs; `prev`
 * itself when nothing changed at all. */
function keepUnchanged(prev: CollectionModel[], next: CollectionModel[]): CollectionModel[] {
  const old = new Map(prev.map((c) => [c.id, c]));
  let same = prev.length === next.length;
  const out = next.map((c, i) => {
    const o = old.get(c.id);
    if (o && JSON.stringify(o) === JSON.stringify(c)) {
      if (prev[i] !== o) same = false;
      return o;
    }
    same = false;
    return c;
  });
  return same ? prev : out;
}

/** Re-fetch all collections (call after create/update/delete/import). */
export function reloadCollections(): Promise<CollectionModel[]> {
  const n = ++seq;
  const p = pb.collections.getFullList({ sort: "name", requestKey: null }).then((l) => {
    if (loading === p) loading = null;
    // An older request answering after a newer one does not undo the newer one's list.
    if (n < applied) return list;
    applied = n;
    const next = keepUnchanged(list, l);
    const changed = next !== list || !loaded;
    list = next;
    loaded = true;
    if (changed) subs.forEach((f) => f(list));
    return list;
  }, (e) => {
    if (loading === p) loading = null;
    throw e;
  });
  loading = p;
  return p;
}

// Refresh when the tab becomes visible again or the window gets the focus back. Switching
// back to a tab fires both (visibilitychange, then focus): one refresh serves both. Nothing is
// fetched while the tab is hidden, before the first load, or when no view shows collections
// (e.g. signed out).
const REFRESH_DEBOUNCE_MS = 200;
let refreshTimer: number | undefined;
function refreshSoon() {
  if (document.visibilityState === "hidden") return;
  clearTimeout(refreshTimer);
  refreshTimer = window.setTimeout(() => {
    refreshTimer = undefined;
    if (document.visibilityState === "hidden" || !loaded || subs.size === 0) return;
    reloadCollections().catch(() => {});
  }, REFRESH_DEBOUNCE_MS);
}
let watching = false;
function watchVisibility() {
  if (watching) return;
  watching = true;
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "hidden") clearTimeout(refreshTimer);
    else refreshSoon();
  });
  window.addEventListener("focus", refreshSoon);
}

/** All collections (sorted by name) and whether the first load finished. */
export function useCollections(): { collections: CollectionModel[]; loaded: boolean } {
  const l = useLive(subs, () => list);
  useEffect(() => {
    watchVisibility();
    if (!loaded && !loading) reloadCollections().catch(() => {});
  }, []);
  return { collections: l, loaded };
}

export function findCollection(idOrName: string): CollectionModel | undefined {
  return list.find((c) => c.id === idOrName || c.name === idOrName);
}
