// The OAuth2 providers form of an auth collection (collection editor, "Auth options" tab).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { start } from "./harness.mjs";

let h, page, users, tokenServer, tokenURL;
// A stand-in token endpoint for the OIDC provider: it records what the server sends it (the
// client secret among it) and refuses the code.
const tokenCalls = [];
before(async () => {
  tokenServer = http.createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", () => {
      tokenCalls.push({ auth: req.headers.authorization ?? "", body });
      res.writeHead(400, { "content-type": "application/json" });
      res.end('{"error":"invalid_grant"}');
    });
  });
  await new Promise((r) => tokenServer.listen(0, "127.0.0.1", r));
  tokenURL = `http://127.0.0.1:${tokenServer.address().port}/token`;
  h = await start();
  page = await h.newPage();
  await h.signIn(page);
  users = (await h.api("/api/collections/users")).body;
});
after(async () => {
  await h?.stop();
  await new Promise((r) => (tokenServer ? tokenServer.close(r) : r()));
});

async function openOptions() {
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" });
  await h.goto(page, `/collections/${users.id}/edit`);
  await page.waitForSelector('[data-testid="collection-editor"][data-version="1"]');
  await page.click('role=tab[name="Auth options"]');
  await page.waitForSelector('[data-testid="add-provider"]');
}

/** Scroll the editor's body (only) so that `selector` is at its top. */
async function scrollTo(selector) {
  await page.locator(".modal-body").evaluate((body, sel) => {
    const el = body.querySelector(sel);
    body.scrollTop += el.getBoundingClientRect().top - body.getBoundingClientRect().top - 12;
  }, selector);
}

async function save() {
  await page.click('[data-testid="save-collection"]');
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" }); // closes only when saved
}

async function addProvider(name) {
  await page.selectOption('[data-testid="new-provider"]', name);
  await page.click('[data-testid="add-provider"]');
  const card = page.locator(`[data-testid="oauth2-provider"][data-provider="${name}"]`);
  await card.waitFor();
  return card;
}

// A provider's inputs are named after the error keys they show (oauth2.providers.<i>.<key>).
const input = (card, key) => card.locator(`input[name$=".${key}"]`);
const fieldError = (card, key) => card.locator(`.field:has(input[name$=".${key}"]) [data-testid="field-error"]`);

/** Whether the server still holds each provider's secret: sending the providers back as the
 * server answers them (no clientSecret) is accepted only when it does, with OAuth2 on. */
/** The client secret the server signs in to `provider` with: a sign-in's code exchange, as
 * the stand-in token endpoint received it. */
async function secretSent(provider) {
  const n = tokenCalls.length;
  const r = await h.api("/api/collections/users/auth-with-oauth2", {
    guest: true, method: "POST",
    body: { provider, code: "some-code", codeVerifier: "v".repeat(43), redirectURL: "http://127.0.0.1/callback" },
  });
  // (the exchange may be tried twice, the credentials in a Basic header and then in the form)
  const calls = tokenCalls.slice(n);
  assert.ok(calls.length >= 1, `a code exchange (${r.status} ${JSON.stringify(r.body)})`);
  const secrets = calls.map(({ auth, body }) => {
    const form = new URLSearchParams(body);
    if (form.has("client_secret")) return form.get("client_secret");
    if (auth.startsWith("Basic ")) return decodeURIComponent(Buffer.from(auth.slice(6), "base64").toString().split(":")[1]);
    return "";
  });
  assert.ok(secrets.every((x) => x === secrets[0]), JSON.stringify(secrets));
  return secrets[0];
}

async function secretsKept() {
  const cur = (await h.api(`/api/collections/${users.id}`)).body;
  const r = await h.api(`/api/collections/${users.id}`, { method: "PATCH", body: { oauth2: cur.oauth2 } });
  return r.status === 200 ? true : r.body;
}

test("oauth2: add providers through the form, save, and see them kept after a reload", async () => {
  await openOptions();
  assert.equal(await page.locator('[data-testid="oauth2-provider"]').count(), 0);
  await page.click('label:has-text("Sign in with OAuth2 providers")');

  // the select offers the providers the server signs in with
  const offered = await page.locator('[data-testid="new-provider"] option').evaluateAll((os) => os.map((o) => o.value));
  assert.deepEqual(offered.sort(), ["apple", "discord", "github", "gitlab", "google", "microsoft", "oidc", "oidc2", "oidc3"]);

  const google = await addProvider("google");
  await page.waitForFunction(() => !!document.activeElement?.closest('[data-provider="google"]'), null, { timeout: 10000 }).catch(() => {});
  const focused = await page.evaluate(() => [document.activeElement?.closest("[data-provider]")?.getAttribute("data-provider"), document.activeElement?.labels?.[0]?.textContent]);
  assert.deepEqual(focused, ["google", "Client ID *"], "focus moves to the new provider's client id");
  await page.keyboard.type("google-client-1");
  await input(google, "clientSecret").fill("google-secret-1");
  assert.ok(!(await page.locator('[data-testid="new-provider"] option[value="google"]').count()), "an added provider is no longer offered");

  const oidc = await addProvider("oidc");
  await input(oidc, "clientId").fill("oidc-client");
  await input(oidc, "clientSecret").fill("oidc-secret");
  await input(oidc, "displayName").fill("Acme SSO");
  await input(oidc, "authURL").fill("https://sso.example.com/authorize");
  await input(oidc, "tokenURL").fill(tokenURL);
  await input(oidc, "extra.issuers").fill("https://sso.example.com, https://sso2.example.com");
  await oidc.locator('label:has-text("Use PKCE")').click(); // off
  await oidc.locator("h4").waitFor();
  assert.equal(await oidc.locator("h4").textContent(), "Acme SSO");

  assert.deepEqual(await h.axe(page), [], "oauth2 providers form");
  await scrollTo(".card:has(.oauth2-providers)");
  await h.screenshot(page, "oauth2-providers");
  await scrollTo('[data-provider="oidc"]');
  await h.screenshot(page, "oauth2-oidc");
  await save();

  const saved = (await h.api(`/api/collections/${users.id}`)).body.oauth2;
  assert.equal(saved.enabled, true);
  assert.deepEqual(saved.providers.map((p) => p.name), ["google", "oidc"]);
  const [g, o] = saved.providers;
  assert.equal(g.clientId, "google-client-1");
  assert.equal(g.clientSecret ?? "", "", "the server never shows a secret");
  assert.equal(o.displayName, "Acme SSO");
  assert.equal(o.authURL, "https://sso.example.com/authorize");
  assert.equal(o.tokenURL, tokenURL);
  assert.equal(o.pkce, false);
  assert.deepEqual(o.extra.issuers, ["https://sso.example.com", "https://sso2.example.com"]);
  assert.equal(await secretsKept(), true, "both secrets were stored");
  assert.equal(await secretSent("oidc"), "oidc-secret");

  // what sign-in offers
  const methods = (await h.api("/api/collections/users/auth-methods", { guest: true })).body;
  assert.deepEqual(methods.oauth2.providers.map((p) => p.name).sort(), ["google", "oidc"]);
  assert.match(methods.oauth2.providers.find((p) => p.name === "google").authURL, /client_id=google-client-1/);

  await page.reload();
  await page.waitForSelector('nav[aria-label="Main"]');
  await openOptions();
  const g2 = page.locator('[data-testid="oauth2-provider"][data-provider="google"]');
  assert.equal(await input(g2, "clientId").inputValue(), "google-client-1");
  assert.equal(await input(g2, "clientSecret").inputValue(), "", "the secret is not shown");
  assert.equal(await input(g2, "clientSecret").getAttribute("placeholder"), "•••••••• (unchanged)");
  assert.equal(await input(page.locator('[data-provider="oidc"]'), "extra.issuers").inputValue(), "https://sso.example.com, https://sso2.example.com");
  await scrollTo(".card:has(.oauth2-providers)");
  await h.screenshot(page, "oauth2-saved");
  await page.keyboard.press("Escape"); // unchanged: closes without asking
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" });
});

test("oauth2: saving without retyping a secret keeps it; a new secret replaces it", async () => {
  await openOptions();
  const google = page.locator('[data-testid="oauth2-provider"][data-provider="google"]');
  await input(google, "clientId").fill("google-client-2");
  await save(); // OAuth2 is on, so a lost secret would be refused ("Cannot be blank")
  let saved = (await h.api(`/api/collections/${users.id}`)).body.oauth2;
  assert.equal(saved.providers.find((p) => p.name === "google").clientId, "google-client-2");
  assert.equal(await secretsKept(), true, "the secrets survived a save that did not retype them");
  assert.equal(await secretSent("oidc"), "oidc-secret");

  // typing then clearing the secret is the same as not touching it
  await openOptions();
  await input(google, "clientSecret").fill("x");
  await input(google, "clientSecret").fill("");
  await input(google, "clientId").fill("google-client-3");
  await save();
  assert.equal(await secretsKept(), true);
  assert.equal(await secretSent("oidc"), "oidc-secret");

  // a secret typed anew replaces the stored one
  await openOptions();
  const oidc = page.locator('[data-testid="oauth2-provider"][data-provider="oidc"]');
  assert.equal(await input(oidc, "clientSecret").getAttribute("placeholder"), "•••••••• (unchanged)");
  await input(oidc, "clientSecret").fill("oidc-secret-2");
  await save();
  assert.equal(await secretSent("oidc"), "oidc-secret-2");

  // editing other auth options does not touch the providers
  await openOptions();
  await page.fill('label:has-text("Auth token") + input', "7200");
  await save();
  saved = (await h.api(`/api/collections/${users.id}`)).body;
  assert.equal(saved.authToken.duration, 7200);
  assert.deepEqual(saved.oauth2.providers.map((p) => [p.name, p.clientId]), [["google", "google-client-3"], ["oidc", "oidc-client"]]);
  assert.equal(await secretsKept(), true);
});

test("oauth2: the server's errors show next to the provider field they concern", async () => {
  await openOptions();
  const github = await addProvider("github"); // no client id, no secret
  const oidc = page.locator('[data-testid="oauth2-provider"][data-provider="oidc"]');
  await input(oidc, "tokenURL").fill("not a url");
  await page.click('[data-testid="save-collection"]');

  const idErr = fieldError(github, "clientId");
  await idErr.waitFor();
  assert.match(await idErr.textContent(), /blank/i);
  assert.match(await fieldError(github, "clientSecret").textContent(), /blank/i);
  assert.match(await fieldError(oidc, "tokenURL").textContent(), /url/i);
  assert.equal(await fieldError(oidc, "authURL").count(), 0, "only the fields the server refused");
  assert.equal(await page.locator('[data-provider="google"] [data-testid="field-error"]').count(), 0);
  assert.equal(await input(github, "clientId").getAttribute("aria-invalid"), "true");
  assert.ok(await github.evaluate((el) => el.classList.contains("pcard-error")));
  assert.deepEqual(await h.axe(page), [], "oauth2 form with errors");
  await scrollTo('[data-provider="github"]');
  await h.screenshot(page, "oauth2-error");
  let r = (await h.api(`/api/collections/${users.id}`)).body.oauth2;
  assert.deepEqual(r.providers.map((p) => p.name), ["google", "oidc"], "nothing was saved");

  // fix the URL, drop GitHub with its Remove button (keyboard): its errors go with it
  await input(oidc, "tokenURL").fill(`${tokenURL}?v=2`);
  await github.locator('[data-testid="remove-provider"]').focus();
  await page.keyboard.press("Enter");
  await github.waitFor({ state: "detached" });
  // the form moves focus once the card is gone (a task after the render): wait for it
  await page.waitForFunction(() => document.activeElement?.getAttribute("data-testid") === "new-provider", null, { timeout: 10000 }).catch(() => {});
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute("data-testid")), "new-provider", "focus goes to the add select");
  assert.equal(await page.locator('[data-testid="oauth2-provider"] [data-testid="field-error"]').count(), 0);
  await save();
  r = (await h.api(`/api/collections/${users.id}`)).body.oauth2;
  assert.deepEqual(r.providers.map((p) => p.name), ["google", "oidc"]);
  assert.equal(r.providers[1].tokenURL, `${tokenURL}?v=2`);
  assert.equal(await secretsKept(), true);
  assert.equal(await secretSent("oidc"), "oidc-secret-2");
});

test("oauth2: remove a provider and keep settings the form does not show", async () => {
  // a provider setting the form has no input for survives a save through it
  const cur = (await h.api(`/api/collections/${users.id}`)).body.oauth2;
  const providers = cur.providers.map((p) => (p.name === "oidc" ? { ...p, extra: { ...p.extra, custom: "kept" } } : p));
  assert.equal((await h.api(`/api/collections/${users.id}`, { method: "PATCH", body: { oauth2: { ...cur, providers } } })).status, 200);

  await openOptions();
  await page.locator('[data-provider="google"] [data-testid="remove-provider"]').click();
  await save();
  const r = (await h.api(`/api/collections/${users.id}`)).body.oauth2;
  assert.deepEqual(r.providers.map((p) => p.name), ["oidc"]);
  assert.equal(r.providers[0].extra.custom, "kept");
  assert.equal(r.providers[0].displayName, "Acme SSO");
  assert.equal(await secretsKept(), true);
  assert.equal(await secretSent("oidc"), "oidc-secret-2");
  assert.deepEqual(page.errors, []);
});
