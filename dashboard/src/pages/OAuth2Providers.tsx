// The OAuth2 providers of an auth collection (`oauth2.providers`), edited as a form: one card
// per configured provider with its client id and secret and, by provider, its endpoints and
// other options; "Add provider" picks among the providers the server can sign in with.
//
// The server never answers with a provider's client secret, and a provider sent without one
// keeps the secret it has (an empty one would replace it). So the secret input starts empty,
// and an empty input sends no `clientSecret` at all: saving without retyping it keeps it, as
// PocketBase's dashboard does. Every other member of a provider is kept as loaded.
import { useState } from "preact/hooks";
import { TextField, CheckboxField, ListField, SelectField, Badge, useId, scopedErrors } from "../ui";

type C = Record<string, any>;
type Kind = "plain" | "oidc" | "microsoft" | "selfhosted" | "apple";

/** The providers ferrobase signs in with (host/src/auth/oauth2), with their default endpoints. */
export const OAUTH2_PROVIDERS: Array<{ name: string; title: string; kind: Kind; urls?: [string, string, string] }> = [
  { name: "google", title: "Google", kind: "plain" },
  { name: "github", title: "GitHub", kind: "plain" },
  {
    name: "gitlab", title: "GitLab", kind: "selfhosted",
    urls: ["https://gitlab.com/oauth/authorize", "https://gitlab.com/oauth/token", "https://gitlab.com/api/v4/user"],
  },
  {
    name: "microsoft", title: "Microsoft", kind: "microsoft",
    urls: ["https://login.microsoftonline.com/common/oauth2/v2.0/authorize", "https://login.microsoftonline.com/common/oauth2/v2.0/token", "https://graph.microsoft.com/v1.0/me"],
  },
  { name: "apple", title: "Apple", kind: "apple" },
  { name: "discord", title: "Discord", kind: "plain" },
  { name: "oidc", title: "OpenID Connect", kind: "oidc" },
  { name: "oidc2", title: "OpenID Connect (2)", kind: "oidc" },
  { name: "oidc3", title: "OpenID Connect (3)", kind: "oidc" },
];

// Where Microsoft's email comes from (extra.idTokenEmailClaim), as the server reads it.
const MS_EMAIL_FROM = [
  { value: "", label: "Microsoft Graph's mail (default)" },
  { value: "any_verified", label: "ID token: verified_primary_email, else email if xms_edov" },
  { value: "verified_primary_email", label: "ID token: verified_primary_email" },
  { value: "email_and_xms_edov", label: "ID token: email, when xms_edov is true" },
  { value: "email", label: "ID token: email (unverified)" },
];

// Fields a new OAuth2 user's profile can fill (as PocketBase's dashboard offers them).
const MAP_EXCLUDED = ["id", "email", "emailVisibility", "verified", "tokenKey", "password"];
const MAP_TYPES = ["text", "editor", "url", "email", "json"];
const MAPPED: Array<[string, string, boolean]> = [
  ["name", "Full name", false],
  ["avatarURL", "Avatar", true],
  ["id", "Provider user id", false],
  ["username", "Username", false],
];

const providerTitle = (p: C) => OAUTH2_PROVIDERS.find((x) => x.name === p.name)?.title ?? p.name ?? "Provider";

export function OAuth2Providers(p: {
  oauth2: C;
  /** Shallow patch of `oauth2`. */
  set: (patch: C) => void;
  /** All of the editor's field errors (keys like `oauth2.providers.0.clientId`). */
  errs: Record<string, string>;
  /** Drops the errors whose key starts with a prefix (a removed provider shifts the indexes). */
  clearErrors: (prefix: string) => void;
  /** Names of the providers saved on the server (they have a secret there, never shown). */
  stored: string[];
  fields: C[];
}) {
  const o = p.oauth2 ?? {};
  const providers: C[] = Array.isArray(o.providers) ? o.providers : [];
  const e = p.errs;
  const addId = useId("addprovider");
  const available = OAUTH2_PROVIDERS.filter((x) => !providers.some((q) => q.name === x.name));
  const [pick, setPick] = useState("");
  const chosen = available.some((x) => x.name === pick) ? pick : available[0]?.name ?? "";
  const setProviders = (l: C[]) => p.set({ providers: l });

  function add() {
    if (!chosen) return;
    const i = providers.length;
    setProviders([...providers, { name: chosen, clientId: "" }]);
    setTimeout(() => document.getElementById(`oauth2-p${i}-clientId`)?.focus());
  }
  function remove(i: number) {
    setProviders(providers.filter((_, j) => j !== i));
    p.clearErrors("oauth2.providers");
    setTimeout(() => document.getElementById(addId)?.focus());
  }

  const mapped: C = o.mappedFields ?? {};
  const mapOptions = (withFiles: boolean) => [
    { value: "", label: "(none)" },
    ...p.fields
      .filter((f) => !MAP_EXCLUDED.includes(f.name) && (MAP_TYPES.includes(f.type) || (withFiles && f.type === "file")))
      .map((f) => ({ value: f.name, label: f.name })),
  ];
  const mapErrs = scopedErrors(e, "oauth2.mappedFields");

  return (
    <div class="oauth2-providers">
      <h3 class="section-title" id="oauth2-providers-title">Providers</h3>
      {e["oauth2.providers"] && <div class="field-error" role="alert" data-testid="field-error">{e["oauth2.providers"]}</div>}
      {providers.length === 0 ? (
        <p class="muted small" data-testid="no-providers">
          No providers yet.{o.enabled && <strong> OAuth2 is on, but nobody can sign in with it until you add one.</strong>}
        </p>
      ) : (
        <ul class="pcards" aria-labelledby="oauth2-providers-title">
          {providers.map((prov, i) => (
            <ProviderCard key={`${i}:${prov.name}`} i={i} prov={prov} stored={p.stored.includes(prov.name)}
              errs={scopedErrors(e, `oauth2.providers.${i}`)}
              onChange={(next) => setProviders(providers.map((q, j) => (j === i ? next : q)))}
              onRemove={() => remove(i)} />
          ))}
        </ul>
      )}
      <div class="row pcard-add">
        <label for={addId} class="sr-only">Provider to add</label>
        <select id={addId} class="input" style="width:240px" value={chosen} disabled={!available.length} data-testid="new-provider"
          onChange={(ev) => setPick((ev.target as HTMLSelectElement).value)}>
          {available.length ? available.map((x) => <option value={x.name}>{x.title}</option>) : <option value="">All providers added</option>}
        </select>
        <button type="button" class="btn" data-testid="add-provider" disabled={!available.length} onClick={add}>+ Add provider</button>
      </div>

      <details class="tpl" style="margin-top:16px" open={Object.keys(mapErrs).length > 0 || undefined}>
        <summary>Fields filled from the provider for new users</summary>
        <div class="grid-2">
          {MAPPED.map(([k, label, files]) => (
            <SelectField label={label} value={mapped[k] ?? ""} options={mapOptions(files)} error={mapErrs[k]}
              onChange={(v) => p.set({ mappedFields: { ...mapped, [k]: v } })} />
          ))}
        </div>
      </details>
    </div>
  );
}

function ProviderCard(p: { i: number; prov: C; stored: boolean; errs: Record<string, string>; onChange: (next: C) => void; onRemove: () => void }) {
  const { i, prov, errs } = p;
  const info = OAUTH2_PROVIDERS.find((x) => x.name === prov.name);
  const title = providerTitle(prov);
  const heading = info?.kind === "oidc" && prov.displayName ? prov.displayName : title;
  const titleId = `oauth2-p${i}-title`;
  const extra: C = prov.extra && typeof prov.extra === "object" ? prov.extra : {};
  const id = (k: string) => `oauth2-p${i}-${k}`;
  const name = (k: string) => `oauth2.providers.${i}.${k}`;
  const set = (k: string, v: unknown) => p.onChange({ ...prov, [k]: v });
  const setExtra = (k: string, v: unknown) => {
    const next = { ...extra, [k]: v };
    if (v === "" || (Array.isArray(v) && v.length === 0)) delete next[k];
    set("extra", next);
  };
  const text = (k: string, label: string, o: { hint?: string; placeholder?: string; required?: boolean; type?: string } = {}) => (
    <TextField id={id(k)} name={name(k)} label={label} value={prov[k] ?? ""} onChange={(v) => set(k, v)} error={errs[k]}
      hint={o.hint} placeholder={o.placeholder} required={o.required} type={o.type} mono={o.type === "url"} />
  );
  const urls = (required: boolean, defaults?: [string, string, string], userInfo = true) => (
    <>
      {text("authURL", "Auth URL", { type: "url", required, placeholder: defaults?.[0] })}
      {text("tokenURL", "Token URL", { type: "url", required, placeholder: defaults?.[1] })}
      {userInfo && text("userInfoURL", "User info URL", { type: "url", placeholder: defaults?.[2], hint: defaults ? undefined : "Empty: the user is read from the ID token." })}
    </>
  );
  // Errors on members this card has no input for (shown so none goes unseen).
  const shown = ["name", "clientId", "clientSecret", "authURL", "tokenURL", "userInfoURL", "displayName", "pkce", "extra.jwksURL", "extra.issuers", "extra.idTokenEmailClaim"];
  const other = Object.keys(errs).filter((k) => !shown.includes(k));

  return (
    <li class={`pcard ${Object.keys(errs).length ? "pcard-error" : ""}`} data-testid="oauth2-provider" data-provider={prov.name}>
      <div class="pcard-head">
        <span class="plogo" aria-hidden="true">{(heading || "?").slice(0, 1).toUpperCase()}</span>
        <div class="pcard-title">
          <h4 id={titleId}>{heading}</h4>
          <span class="muted small mono">{prov.name}</span>
        </div>
        {!info && <Badge kind="warn" title="Its settings are kept, but this server cannot sign in with it.">not supported here</Badge>}
        <button type="button" class="btn btn-sm btn-ghost" data-testid="remove-provider" onClick={p.onRemove}>
          Remove<span class="sr-only"> {heading}</span>
        </button>
      </div>
      {errs.name && <div class="field-error pcard-msg" role="alert" data-testid="field-error">{errs.name}</div>}
      <div class="pcard-body">
        <div class="grid-2">
          {text("clientId", "Client ID", { required: true })}
          <TextField id={id("clientSecret")} name={name("clientSecret")} label="Client secret" type="password" autocomplete="new-password"
            value={prov.clientSecret ?? ""} error={errs.clientSecret} required={!p.stored}
            placeholder={p.stored ? "•••••••• (unchanged)" : undefined}
            hint={p.stored ? "Never shown once saved. Leave empty to keep the saved one, or type a new one." : info?.kind === "apple" ? "A JWT signed with your Sign in with Apple key (valid up to 6 months)." : undefined}
            onChange={(v) => {
              // empty = not sent, so the server keeps the secret it has
              const next: C = { ...prov, clientSecret: v };
              if (v === "") delete next.clientSecret;
              p.onChange(next);
            }} />
        </div>

        {info?.kind === "oidc" && (
          <>
            {text("displayName", "Display name", { placeholder: "OIDC", hint: "The name sign-in pages show for this provider." })}
            <h5 class="pcard-sub">Endpoints</h5>
            <div class="grid-2">{urls(true)}</div>
            <div class="grid-2">
              <TextField id={id("jwksURL")} name={name("extra.jwksURL")} label="JWKS URL" type="url" mono value={extra.jwksURL ?? ""}
                onChange={(v) => setExtra("jwksURL", v)} error={errs["extra.jwksURL"]}
                hint="Keys that verify the ID token's signature (used without a user info URL)." />
              <ListField id={id("issuers")} name={name("extra.issuers")} label="Issuers" value={extra.issuers}
                onChange={(v) => setExtra("issuers", v)} error={errs["extra.issuers"]}
                hint="Accepted values of the ID token's iss claim, comma separated." />
            </div>
            <CheckboxField id={id("pkce")} name={name("pkce")} label="Use PKCE" checked={prov.pkce !== false} onChange={(v) => set("pkce", v)}
              error={errs.pkce} hint="Safe to leave on: providers without PKCE support ignore it." />
          </>
        )}
        {info?.kind === "microsoft" && (
          <>
            <h5 class="pcard-sub">Azure AD endpoints (optional)</h5>
            <p class="muted small pcard-note">Empty: the multi-tenant “common” endpoints. For one tenant: <code>https://login.microsoftonline.com/TENANT_ID/oauth2/v2.0/authorize</code> and <code>…/token</code>.</p>
            <div class="grid-2">{urls(false, info.urls, false)}</div>
            <SelectField id={id("idTokenEmailClaim")} name={name("extra.idTokenEmailClaim")} label="Email from" value={extra.idTokenEmailClaim ?? ""}
              options={MS_EMAIL_FROM} onChange={(v) => setExtra("idTokenEmailClaim", v)} error={errs["extra.idTokenEmailClaim"]} />
          </>
        )}
        {info?.kind === "selfhosted" && (
          <>
            <h5 class="pcard-sub">Self-hosted endpoints (optional)</h5>
            <div class="grid-3">{urls(false, info.urls)}</div>
          </>
        )}
        {!info && (
          <p class="muted small" style="margin-top:0">Ferrobase cannot sign in with “{prov.name}”; its settings are kept as they are.</p>
        )}
        {other.length > 0 && (
          <div class="field-error" role="alert" data-testid="field-error">{other.map((k) => `${k}: ${errs[k]}`).join(" · ")}</div>
        )}
      </div>
    </li>
  );
}
