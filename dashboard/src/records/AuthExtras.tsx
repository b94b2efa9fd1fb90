// The extras of an auth record in its panel: verification state, verification / password-reset
// mails, impersonation (the token shown to copy) and the linked OAuth2 accounts.
import type { CollectionModel, RecordModel } from "pocketbase";
import { useEffect, useState } from "preact/hooks";
import { pb } from "../pb";
import { Badge, confirmDialog, errorMessage, toast, useId } from "../ui";
import { formatLocal } from "./util";

type ExternalAuth = RecordModel & { provider: string; providerId: string; created: string };

export function AuthExtras(props: { collection: CollectionModel; record: RecordModel }) {
  const c = props.collection;
  const r = props.record;
  const [msg, setMsg] = useState<{ kind: "ok" | "err"; text: string } | null>(null);
  const [busy, setBusy] = useState("");
  const [duration, setDuration] = useState("0");
  const [token, setToken] = useState("");
  const [links, setLinks] = useState<ExternalAuth[] | null>(null);
  const [linksErr, setLinksErr] = useState("");
  const durId = useId("imp");
  const tokId = useId("tok");

  const loadLinks = async () => {
    try {
      setLinksErr("");
      const list = await pb.collection("_externalAuths").getFullList<ExternalAuth>({
        filter: pb.filter("recordRef = {:id} && collectionRef = {:cid}", { id: r.id, cid: c.id }),
        requestKey: null,
      });
      setLinks(list);
    } catch (e) {
      setLinks([]);
      setLinksErr(errorMessage(e));
    }
  };
  useEffect(() => {
    loadLinks();
  }, [r.id]);

  const run = async (key: string, fn: () => Promise<unknown>, ok: string) => {
    setBusy(key);
    setMsg(null);
    try {
      await fn();
      setMsg({ kind: "ok", text: ok });
    } catch (e) {
      setMsg({ kind: "err", text: errorMessage(e) });
    } finally {
      setBusy("");
    }
  };

  const impersonate = () =>
    run(
      "imp",
      async () => {
        const client = await pb.collection(c.id).impersonate(r.id, Math.max(0, Number(duration) || 0), { requestKey: null });
        setToken(client.authStore.token);
      },
      "Impersonation token created",
    );

  const copy = async () => {
    try {
      await navigator.clipboard.writeText(token);
      toast("Token copied");
    } catch {
      const el = document.getElementById(tokId) as HTMLTextAreaElement | null;
      el?.select();
    }
  };

  const unlink = async (a: ExternalAuth) => {
    const ok = await confirmDialog({
      title: `Unlink ${a.provider}?`,
      message: `The ${a.provider} account ${a.providerId} will no longer sign in as this record.`,
      confirmText: "Unlink",
      danger: true,
    });
    if (!ok) return;
    try {
      await pb.collection("_externalAuths").delete(a.id);
      toast(`Unlinked ${a.provider}`);
      loadLinks();
    } catch (e) {
      setLinksErr(errorMessage(e));
    }
  };

  const email = String(r.email ?? "");
  return (
    <section class="rec-auth" aria-labelledby={`${durId}-h`}>
      <h3 class="rec-h3" id={`${durId}-h`}>
        Account
      </h3>
      <div class="rec-auth-row">
        {r.verified ? <Badge kind="ok">Verified</Badge> : <Badge kind="warn">Not verified</Badge>}
        {email && <span class="rec-mono">{email}</span>}
      </div>
      <div class="rec-auth-row">
        <button
          type="button"
          class="btn btn-ghost btn-sm"
          disabled={!email || !!busy}
          onClick={() => run("ver", () => pb.collection(c.id).requestVerification(email, { requestKey: null }), `Verification mail sent to ${email}`)}
        >
          {busy === "ver" ? "Sending…" : "Send verification"}
        </button>
        <button
          type="button"
          class="btn btn-ghost btn-sm"
          disabled={!email || !!busy}
          onClick={() => run("reset", () => pb.collection(c.id).requestPasswordReset(email, { requestKey: null }), `Password reset mail sent to ${email}`)}
        >
          {busy === "reset" ? "Sending…" : "Send password reset"}
        </button>
      </div>
      <div class="rec-auth-row">
        <label for={durId}>Token duration (seconds, 0 = the collection's)</label>
        <input
          id={durId}
          class="input rec-dur"
          type="number"
          min={0}
          value={duration}
          onInput={(e) => setDuration((e.target as HTMLInputElement).value)}
        />
        <button type="button" class="btn btn-ghost btn-sm" disabled={!!busy} onClick={impersonate}>
          {busy === "imp" ? "Working…" : "Impersonate"}
        </button>
      </div>
      {msg && (
        <div class={msg.kind === "ok" ? "rec-ok" : "field-error"} role={msg.kind === "err" ? "alert" : "status"}>
          {msg.text}
        </div>
      )}
      {token && (
        <div class="rec-token">
          <label for={tokId}>Auth token of {email || r.id}</label>
          <textarea id={tokId} class="input mono" rows={3} readOnly value={token} onFocus={(e) => (e.target as HTMLTextAreaElement).select()} />
          <button type="button" class="btn btn-ghost btn-sm" onClick={copy}>
            Copy token
          </button>
        </div>
      )}
      <div class="rec-oauth">
        <h3 class="rec-h3">Linked OAuth2 accounts</h3>
        {links === null && <span class="rec-muted">Loading…</span>}
        {linksErr && <div class="field-error">{linksErr}</div>}
        {links && links.length === 0 && !linksErr && <span class="rec-muted">None.</span>}
        {links && links.length > 0 && (
          <ul class="rec-oauth-list">
            {links.map((a) => (
              <li key={a.id}>
                <strong>{a.provider}</strong> <span class="rec-mono">{a.providerId}</span>{" "}
                <span class="rec-muted">{a.created ? formatLocal(a.created) : ""}</span>
                <button type="button" class="btn btn-ghost btn-sm" onClick={() => unlink(a)}>
                  Unlink
                </button>
              </li>
            ))}
          </ul>
        )}
      </div>
    </section>
  );
}
