// The records of one collection: a paginated, sortable, filterable table with a column picker,
// bulk delete, live updates through realtime, and the record form in a drawer.
import type { JSX } from "preact";
import type { CollectionField, CollectionModel, ListResult, RecordModel } from "pocketbase";
import { useCallback, useEffect, useMemo, useRef, useState } from "preact/hooks";
import { pb } from "../pb";
import { useCollections } from "../collectionsStore";
import { Badge, EmptyState, PageHeader, confirmDialog, errorMessage, link, toast, toastError, useId } from "../ui";
import { Cell, collectionHasProtectedFiles, tzNote, type CellContext } from "./cells";
import { RecordPanel } from "./RecordPanel";
import { presentableFields, userTimeZone } from "./util";
import "./records.css";

const PER_PAGE = [10, 20, 30, 50, 100, 200, 500];

export function RecordsView(props: { collection: CollectionModel }): JSX.Element {
  // A new collection starts with a fresh state (page, filter, sort, selection).
  return <RecordsTable key={props.collection.id} collection={props.collection} />;
}

function columnsKey(c: CollectionModel) {
  return `ferrobase.records.hidden.${c.id}`;
}
function loadHidden(c: CollectionModel): string[] {
  try {
    const v = JSON.parse(localStorage.getItem(columnsKey(c)) || "null");
    if (Array.isArray(v)) return v.map(String);
  } catch {
    /* ignore */
  }
  // By default: editor bodies and json blobs are left out of wide tables.
  const fields = visibleFields(c);
  return fields.length > 8 ? fields.filter((f) => f.type === "editor").map((f) => f.name) : [];
}

function visibleFields(c: CollectionModel): CollectionField[] {
  return (c.fields || []).filter((f) => !f.hidden && f.type !== "password");
}

function defaultSort(c: CollectionModel): string {
  return (c.fields || []).some((f) => f.name === "created") ? "-created" : "";
}

/** Rows equal on the sort column keep one order between reloads (insertion order, newest first). */
function withTieBreak(sort: string, isView: boolean): string {
  if (isView) return sort; // a view's rows have no rowid
  if (!sort) return "-@rowid";
  return sort.includes("@rowid") ? sort : `${sort},-@rowid`;
}

function RecordsTable(props: { collection: CollectionModel }) {
  const c = props.collection;
  const isView = c.type === "view";
  const { collections } = useCollections();

  // The table's state lives in the hash's query too (#/collections/x?filter=…&sort=…&page=…),
  // so a reload or a shared link shows the same rows.
  const [q0] = useState(() => new URLSearchParams(location.hash.split("?")[1] ?? ""));
  const [page, setPage] = useState(() => Math.max(1, Number(q0.get("page")) || 1));
  const [perPage, setPerPage] = useState(() => (PER_PAGE.includes(Number(q0.get("perPage"))) ? Number(q0.get("perPage")) : 30));
  const [sort, setSort] = useState(() => q0.get("sort") ?? defaultSort(c));
  const [filterText, setFilterText] = useState(() => q0.get("filter") ?? "");
  const [filter, setFilter] = useState(() => q0.get("filter") ?? "");
  const [filterErr, setFilterErr] = useState("");
  const [loadErr, setLoadErr] = useState("");
  const [data, setData] = useState<ListResult<RecordModel> | null>(null);
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const [hidden, setHidden] = useState<string[]>(() => loadHidden(c));
  const [selected, setSelected] = useState<Set<string>>(new Set());
  const [panel, setPanel] = useState<{ record: RecordModel | null; n: number } | null>(null);
  const [fileToken, setFileToken] = useState("");
  const [live, setLive] = useState<"off" | "on" | "failed">("off");
  const seq = useRef(0);
  const filterId = useId("recfilter");
  const perPageId = useId("recperpage");

  const fields = useMemo(() => visibleFields(c), [c]);
  const columns = fields.filter((f) => f.name === "id" || !hidden.includes(f.name));
  const expand = useMemo(
    () => (c.fields || []).filter((f) => f.type === "relation" && !f.hidden).map((f) => f.name).join(","),
    [c],
  );
  const presentable = useMemo(() => {
    const m: Record<string, string[]> = {};
    for (const col of collections) m[col.id] = presentableFields(col);
    return m;
  }, [collections]);
  const ctx: CellContext = { presentable, fileToken };

  const refresh = useCallback(() => setTick((t) => t + 1), []);

  // Load the current page.
  useEffect(() => {
    const n = ++seq.current;
    setLoading(true);
    pb.collection(c.id)
      .getList(page, perPage, { sort: withTieBreak(sort, isView), filter, expand, requestKey: null })
      .then((res) => {
        if (n !== seq.current) return;
        setData(res);
        setLoadErr("");
        setFilterErr("");
        if (res.items.length === 0 && page > 1 && res.totalPages > 0 && page > res.totalPages) {
          setPage(res.totalPages);
        }
      })
      .catch((e) => {
        if (n !== seq.current) return;
        if (e?.status === 400 && filter) setFilterErr(errorMessage(e));
        else setLoadErr(errorMessage(e));
      })
      .finally(() => {
        if (n === seq.current) setLoading(false);
      });
  }, [c.id, page, perPage, sort, filter, expand, tick]);

  useEffect(() => {
    const [path, query = ""] = location.hash.split("?");
    const q = new URLSearchParams();
    if (filter) q.set("filter", filter);
    if (sort !== defaultSort(c)) q.set("sort", sort);
    if (page > 1) q.set("page", String(page));
    if (perPage !== 30) q.set("perPage", String(perPage));
    const next = q.toString();
    if (next !== query) history.replaceState(history.state, "", next ? `${path}?${next}` : path);
  }, [filter, sort, page, perPage]);

  // Protected files need a short-lived file token (renewed while the view is open).
  useEffect(() => {
    if (!collectionHasProtectedFiles(c)) return;
    let stop = false;
    const get = () =>
      pb.files
        .getToken({ requestKey: null })
        .then((t) => !stop && setFileToken(t))
        .catch(() => {});
    get();
    const t = setInterval(get, 100_000);
    return () => {
      stop = true;
      clearInterval(t);
    };
  }, [c.id]);

  // Live updates: any change of the collection refreshes the current page (debounced).
  useEffect(() => {
    if (isView) return;
    let active = true;
    let unsub: (() => Promise<void>) | null = null;
    let timer: ReturnType<typeof setTimeout> | undefined;
    pb.collection(c.id)
      .subscribe("*", () => {
        clearTimeout(timer);
        timer = setTimeout(() => active && setTick((t) => t + 1), 250);
      })
      .then((u) => {
        if (active) {
          unsub = u;
          setLive("on");
        } else u().catch(() => {});
      })
      .catch(() => active && setLive("failed"));
    return () => {
      active = false;
      clearTimeout(timer);
      unsub?.().catch(() => {});
    };
  }, [c.id]);

  const applyFilter = (e: Event) => {
    e.preventDefault();
    setPage(1);
    setFilterErr("");
    if (filterText.trim() === filter) refresh();
    setFilter(filterText.trim());
  };

  const toggleSort = (name: string) => {
    setSort((s) => (s === name ? `-${name}` : s === `-${name}` ? name : `-${name}`));
    setPage(1);
  };

  const setColumn = (name: string, show: boolean) => {
    const next = show ? hidden.filter((x) => x !== name) : [...hidden, name];
    setHidden(next);
    try {
      localStorage.setItem(columnsKey(c), JSON.stringify(next));
    } catch {
      /* storage full or off: keep it for this session */
    }
  };

  const items = data?.items ?? [];
  const allOnPage = items.length > 0 && items.every((r) => selected.has(r.id));
  const toggleAll = () => {
    const s = new Set(selected);
    if (allOnPage) items.forEach((r) => s.delete(r.id));
    else items.forEach((r) => s.add(r.id));
    setSelected(s);
  };
  const toggleOne = (id: string) => {
    const s = new Set(selected);
    s.has(id) ? s.delete(id) : s.add(id);
    setSelected(s);
  };

  const bulkDelete = async () => {
    const ids = Array.from(selected);
    if (!ids.length) return;
    const ok = await confirmDialog({
      title: `Delete ${ids.length} record${ids.length > 1 ? "s" : ""}?`,
      message: `The selected records of ${c.name} will be deleted. This cannot be undone.`,
      confirmText: "Delete",
      danger: true,
    });
    if (!ok) return;
    const failed: string[] = [];
    let done = false;
    try {
      const batch = pb.createBatch();
      for (const id of ids) batch.collection(c.id).delete(id);
      await batch.send({ requestKey: null });
      done = true;
    } catch {
      // Batches may be off (settings.batch) or one delete may be refused: go one by one so the
      // deletable ones go and the failures are named.
    }
    if (!done) {
      for (const id of ids) {
        try {
          await pb.collection(c.id).delete(id, { requestKey: null });
        } catch (e) {
          failed.push(`${id}: ${errorMessage(e)}`);
        }
      }
    }
    const deleted = ids.length - failed.length;
    if (deleted) toast(`Deleted ${deleted} record${deleted > 1 ? "s" : ""}`);
    if (failed.length) toastError(`Could not delete ${failed.length}: ${failed.join("; ")}`);
    setSelected(new Set(failed.map((f) => f.split(":")[0])));
    refresh();
  };

  const open = (r: RecordModel | null) => {
    setPanel({ record: r, n: 0 });
    if (!r) return;
    // The row may be older than the stored record (a change not refreshed yet): load it fresh,
    // and show that one if it differs.
    pb.collection(c.id)
      .getOne(r.id, { expand, requestKey: null })
      .then((fresh) =>
        setPanel((p) =>
          p?.record?.id === fresh.id && JSON.stringify(p.record) !== JSON.stringify(fresh) ? { record: fresh, n: p.n + 1 } : p,
        ),
      )
      .catch(() => {});
  };
  const total = data?.totalItems ?? 0;
  const totalPages = Math.max(1, data?.totalPages ?? 1);
  // From the loaded page (not the requested one), so the numbers always match the rows shown.
  const from = data && items.length ? (data.page - 1) * data.perPage + 1 : 0;
  const to = from ? from + items.length - 1 : 0;

  return (
    <section class="rec-view" aria-label={`Records of ${c.name}`}>
      <PageHeader
        crumbs={<>Collections / {c.type} collection</>}
        title={
          <span class="rec-title">
            {c.name} {c.system && <Badge>system</Badge>}
          </span>
        }
        actions={
          <>
            <a class="btn btn-ghost" href={link(`/collections/${encodeURIComponent(c.id)}/edit`)} data-testid="edit-collection">
              Edit collection
            </a>
            {!isView && (
              <button type="button" class="btn btn-primary" onClick={() => open(null)} data-testid="record-new">
                + New record
              </button>
            )}
          </>
        }
      />
      <div class="rec-toolbar">
        <form class="rec-filter" role="search" onSubmit={applyFilter}>
          <label for={filterId} class="rec-sr">
            Filter records
          </label>
          <span class="rec-filter-icon" aria-hidden="true">
            ⌕
          </span>
          <input
            id={filterId}
            class={`input mono ${filterErr ? "rec-invalid" : ""}`}
            type="search"
            placeholder={`Filter, e.g. created > "2024-01-01" && id != ""`}
            value={filterText}
            aria-invalid={filterErr ? "true" : undefined}
            aria-describedby={filterErr ? `${filterId}-err` : undefined}
            onInput={(e) => {
              const v = (e.target as HTMLInputElement).value;
              setFilterText(v);
              // The search box's own clear button (or deleting everything) drops the filter.
              if (v === "" && filter) {
                setFilter("");
                setFilterErr("");
                setPage(1);
              }
            }}
            data-testid="records-filter"
          />
          <button type="submit" class="btn btn-ghost">
            Apply
          </button>
          {filter && (
            <button
              type="button"
              class="btn btn-ghost"
              onClick={() => {
                setFilterText("");
                setFilter("");
                setFilterErr("");
                setPage(1);
              }}
            >
              Clear
            </button>
          )}
        </form>
        <div class="rec-toolbar-right">
          <ColumnPicker fields={fields} hidden={hidden} onChange={setColumn} />
          <button type="button" class="btn btn-ghost" onClick={refresh} aria-label="Refresh records" title="Refresh">
            ↻
          </button>
        </div>
      </div>
      {filterErr && (
        <div class="alert alert-error rec-filter-err" role="alert" id={`${filterId}-err`} data-testid="filter-error">
          <strong>Invalid filter.</strong> {filterErr}
        </div>
      )}
      {loadErr && (
        <div class="alert alert-error" role="alert">
          {loadErr}{" "}
          <button type="button" class="btn btn-ghost btn-sm" onClick={refresh}>
            Retry
          </button>
        </div>
      )}
      {selected.size > 0 && (
        <div class="rec-bulk" role="region" aria-label="Selection">
          <span>
            <strong>{selected.size}</strong> selected
          </span>
          <button type="button" class="btn btn-ghost btn-sm" onClick={() => setSelected(new Set())}>
            Clear selection
          </button>
          <button type="button" class="btn btn-danger btn-sm" onClick={bulkDelete} data-testid="bulk-delete">
            Delete selected
          </button>
        </div>
      )}

      <div class="rec-table-wrap" aria-busy={loading}>
        <table class="rec-table" data-testid="records-table">
          <caption class="rec-sr">
            Records of {c.name}, sorted by {sort || "default order"}. {tzNote}
          </caption>
          <thead>
            <tr>
              {!isView && (
                <th class="rec-col-check" scope="col">
                  <input
                    type="checkbox"
                    aria-label="Select all records on this page"
                    checked={allOnPage}
                    onChange={toggleAll}
                    disabled={!items.length}
                  />
                </th>
              )}
              {columns.map((f) => {
                const dir = sort === f.name ? "ascending" : sort === `-${f.name}` ? "descending" : undefined;
                return (
                  <th key={f.name} scope="col" aria-sort={dir} class={`rec-col-${f.type}`}>
                    <button
                      type="button"
                      class="rec-sort"
                      onClick={() => toggleSort(f.name)}
                      data-testid={`sort-${f.name}`}
                      title={`Sort by ${f.name}`}
                    >
                      <span>{f.name}</span>
                      <span class="rec-sort-ind" aria-hidden="true">
                        {dir === "ascending" ? "▲" : dir === "descending" ? "▼" : "↕"}
                      </span>
                    </button>
                  </th>
                );
              })}
            </tr>
          </thead>
          <tbody>
            {items.map((r) => (
              <tr
                key={r.id}
                class={selected.has(r.id) ? "rec-selected" : ""}
                data-id={r.id}
                onClick={(e) => {
                  const t = e.target as HTMLElement;
                  if (t.closest("input,button,a,label")) return;
                  open(r);
                }}
              >
                {!isView && (
                  <td class="rec-col-check">
                    <input
                      type="checkbox"
                      aria-label={`Select record ${r.id}`}
                      checked={selected.has(r.id)}
                      onChange={() => toggleOne(r.id)}
                    />
                  </td>
                )}
                {columns.map((f) => (
                  <td key={f.name} class={`rec-col-${f.type}`} data-field={f.name}>
                    {f.name === "id" ? (
                      <button type="button" class="rec-open" onClick={() => open(r)} aria-label={`Open record ${r.id}`}>
                        {r.id}
                      </button>
                    ) : (
                      <Cell record={r} field={f} ctx={ctx} />
                    )}
                  </td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
        {!loading && data && items.length === 0 && (
          <EmptyState
            title={filter ? "No records match the filter" : "No records yet"}
            action={
              !filter && !isView ? (
                <button type="button" class="btn btn-primary" onClick={() => open(null)}>
                  + New record
                </button>
              ) : undefined
            }
          >
            {filter ? "Try another filter or clear it." : isView ? "The view's query returns no rows." : "Create the first record of this collection."}
          </EmptyState>
        )}
        {loading && !data && (
          <div class="rec-loading" role="status">
            Loading records…
          </div>
        )}
      </div>

      <div class="rec-pager">
        <span class="rec-total">
          <span data-testid="records-total">{total ? (from ? `${from}–${to} of ${total}` : `${total} records`) : "0 records"}</span>
          <span class="rec-tz" title={tzNote}>
            {" "}
            · times in {userTimeZone}
          </span>
          {live === "failed" && (
            <span class="rec-muted" title="The realtime connection failed: use ↻ to refresh">
              {" "}
              · no live updates
            </span>
          )}
          {live === "on" && (
            <span class="rec-live" title="Updates live through realtime">
              {" "}
              · live
            </span>
          )}
        </span>
        <span class="rec-pager-right">
          <label for={perPageId}>Per page</label>
          <select
            id={perPageId}
            class="input rec-narrow"
            value={String(perPage)}
            onChange={(e) => {
              setPerPage(Number((e.target as HTMLSelectElement).value));
              setPage(1);
            }}
          >
            {PER_PAGE.map((n) => (
              <option key={n} value={String(n)}>
                {n}
              </option>
            ))}
          </select>
          <button type="button" class="btn btn-ghost btn-sm" disabled={page <= 1} onClick={() => setPage(page - 1)} aria-label="Previous page">
            ‹ Prev
          </button>
          <span aria-live="polite">
            Page {page} of {totalPages}
          </span>
          <button
            type="button"
            class="btn btn-ghost btn-sm"
            disabled={page >= totalPages}
            onClick={() => setPage(page + 1)}
            aria-label="Next page"
          >
            Next ›
          </button>
        </span>
      </div>

      {panel && (
        <RecordPanel
          key={panel.record ? `${panel.record.id}:${panel.n}` : "new"}
          collection={c}
          collections={collections}
          record={panel.record}
          ctx={ctx}
          expand={expand}
          onClose={() => setPanel(null)}
          onSaved={() => {
            setPanel(null);
            refresh();
          }}
          onDeleted={(id) => {
            setPanel(null);
            const s = new Set(selected);
            s.delete(id);
            setSelected(s);
            refresh();
          }}
        />
      )}
    </section>
  );
}

function ColumnPicker(props: { fields: CollectionField[]; hidden: string[]; onChange: (name: string, show: boolean) => void }) {
  const [open, setOpen] = useState(false);
  const ref = useRef<HTMLDivElement>(null);
  const popId = useId("cols");
  useEffect(() => {
    if (!open) return;
    const onDoc = (e: MouseEvent) => {
      if (!ref.current?.contains(e.target as Node)) setOpen(false);
    };
    const onKey = (e: KeyboardEvent) => e.key === "Escape" && setOpen(false);
    document.addEventListener("mousedown", onDoc);
    document.addEventListener("keydown", onKey);
    return () => {
      document.removeEventListener("mousedown", onDoc);
      document.removeEventListener("keydown", onKey);
    };
  }, [open]);
  const shown = props.fields.filter((f) => f.name === "id" || !props.hidden.includes(f.name)).length;
  return (
    <div class="rec-cols" ref={ref}>
      <button
        type="button"
        class="btn btn-ghost"
        aria-expanded={open}
        aria-controls={popId}
        onClick={() => setOpen(!open)}
        data-testid="columns-button"
      >
        Columns ({shown}/{props.fields.length})
      </button>
      {open && (
        <fieldset class="rec-cols-pop" id={popId}>
          <legend class="rec-sr">Shown columns</legend>
          {props.fields.map((f) => (
            <label key={f.name} class="rec-cols-item">
              <input
                type="checkbox"
                checked={f.name === "id" || !props.hidden.includes(f.name)}
                disabled={f.name === "id"}
                title={f.name === "id" ? "The id column opens the record from the keyboard" : undefined}
                onChange={(e) => props.onChange(f.name, (e.target as HTMLInputElement).checked)}
              />
              <span>{f.name}</span>
              <span class="rec-type">{f.type}</span>
            </label>
          ))}
        </fieldset>
      )}
    </div>
  );
}
