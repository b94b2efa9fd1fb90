// The list of collections, shared by the sidebar, the editor and the records views.
import type { CollectionModel } from "pocketbase";
import { useEffect } from "preact/hooks";
import { useLive } from "./live";
import { pb } from "./pb";

let list: CollectionModel[] = [];
let loaded = false;
let loading: Promise<CollectionModel[]> | null = null;
const subs = new Set<(l: CollectionModel[]) => void>();

/** Re-fetch all collections (call after create/update/delete/import). */
export function reloadCollections(): Promise<CollectionModel[]> {
  loading = pb.collections.getFullList({ sort: "name", requestKey: null }).then((l) => {
    list = l;
    loaded = true;
    loading = null;
    subs.forEach((f) => f(list));
    return l;
  }, (e) => {
    loading = null;
    throw e;
  });
  return loading;
}

/** All collections (sorted by name) and whether the first load finished. */
export function useCollections(): { collections: CollectionModel[]; loaded: boolean } {
  const l = useLive(subs, () => list);
  useEffect(() => {
    if (!loaded && !loading) reloadCollections().catch(() => {});
  }, []);
  return { collections: l, loaded };
}

export function findCollection(idOrName: string): CollectionModel | undefined {
  return list.find((c) => c.id === idOrName || c.name === idOrName);
}
