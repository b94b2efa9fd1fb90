import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { start } from "./harness.mjs";

let h, page;
const dialogs = [];
before(async () => {
  h = await start();
  page = await h.newPage();
  page.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
  await h.signIn(page);
});
after(async () => { await h?.stop(); });

async function openEditor(id) {
  // a previous editor (closed by its save) must be gone first, or this is the same one
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" });
  await h.goto(page, `/collections/${id}/edit`);
  await page.waitForSelector('[data-testid="collection-editor"][data-version="1"]');
}

async function closeEditor(discard = true) {
  await page.keyboard.press("Escape");
  if (discard) {
    await page.waitForSelector("text=Discard your changes?");
    assert.deepEqual(await h.axe(page), [], "discard dialog");
    await page.click('[data-testid="confirm-yes"]');
  }
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" });
}

async function addField(type, name) {
  await page.selectOption('[data-testid="new-field-type"]', type);
  await page.click('[data-testid="add-field"]');
  const inputs = page.locator('[data-testid="field-name"]');
  await inputs.last().fill(name);
}

test("create a collection with several field types", async () => {
  await h.goto(page, "/collections");
  await page.waitForSelector('[data-testid="collection-link"]:has-text("users")');
  assert.deepEqual(await h.axe(page), [], "collections page");
  await page.click('[data-testid="new-collection"]');
  await page.waitForSelector('[data-testid="collection-editor"]');
  await page.fill('input[name="name"]', "posts");
  await addField("text", "title");
  await addField("number", "views");
  await addField("bool", "published");
  await addField("select", "status");
  await page.fill('label:has-text("Choices") + input', "draft, live");
  await addField("date", "due");
  await addField("json", "meta");
  await addField("file", "cover");
  await addField("geoPoint", "where");
  assert.deepEqual(await h.axe(page), [], "collection editor");
  await h.screenshot(page, "collection-editor");
  await page.click('[data-testid="save-collection"]');
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" }); // closes only when saved
  await page.waitForSelector('[data-testid="collection-link"]:has-text("posts")');
  const r = await h.api("/api/collections/posts");
  assert.equal(r.status, 200);
  const types = Object.fromEntries(r.body.fields.map((f) => [f.name, f.type]));
  for (const [n, t] of Object.entries({ title: "text", views: "number", published: "bool", status: "select", due: "date", meta: "json", cover: "file", where: "geoPoint" }))
    assert.equal(types[n], t, `field ${n}`);
  assert.deepEqual(r.body.fields.find((f) => f.name === "status").values, ["draft", "live"]);
});

test("a duplicate collection name shows the server's error next to the name", async () => {
  await h.goto(page, "/collections/new");
  await page.waitForSelector('[data-testid="collection-editor"]');
  await page.fill('input[name="name"]', "posts");
  await page.click('[data-testid="save-collection"]');
  const err = page.locator('.field:has(input[name="name"]) [data-testid="field-error"]');
  await err.waitFor();
  assert.match(await err.textContent(), /\S/);
  await h.screenshot(page, "validation-error");
  await closeEditor();
});

test("changing a rule is enforced by the API; a bad rule shows its error next to the rule", async () => {
  const before = await h.api("/api/collections/posts/records", { guest: true });
  assert.equal(before.status, 403, "locked list rule refuses guests");
  const col = (await h.api("/api/collections/posts")).body;
  await openEditor(col.id);
  await page.click('role=tab[name="API rules"]');
  await page.click('[data-rule="listRule"] .rule-head input[type="checkbox"]'); // unlock: "" = public
  await page.click('[data-testid="save-collection"]');
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" }); // closes only when saved
  const after1 = await h.api("/api/collections/posts/records", { guest: true });
  assert.equal(after1.status, 200, "public list rule lets guests list");

  await openEditor(col.id);
  await page.click('role=tab[name="API rules"]');
  await page.click('[data-rule="viewRule"] .rule-head input[type="checkbox"]');
  await page.fill('textarea[name="viewRule"]', "nosuchfield = 1");
  await page.click('[data-testid="save-collection"]');
  const err = page.locator('[data-rule="viewRule"] [data-testid="field-error"]');
  await err.waitFor();
  assert.match(await err.textContent(), /\S/);
  assert.deepEqual(await h.axe(page), [], "rules tab with an error");
  await h.screenshot(page, "rules-error");
  await closeEditor();
  assert.equal((await h.api("/api/collections/posts")).body.viewRule, null, "the bad rule was not saved");
});

test("rule helpers insert names into the rule being edited", async () => {
  const col = (await h.api("/api/collections/posts")).body;
  await openEditor(col.id);
  await page.click('role=tab[name="API rules"]');
  await page.click('[data-rule="updateRule"] .rule-head input[type="checkbox"]');
  await page.click('textarea[name="updateRule"]');
  await page.click('.rule-insert button:has-text("@request.auth.id")');
  await page.focus('textarea[name="updateRule"]');
  await page.keyboard.press("End");
  await page.keyboard.type(' != ""');
  await page.click('[data-testid="save-collection"]');
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" });
  assert.equal((await h.api("/api/collections/posts")).body.updateRule, '@request.auth.id != ""');
});

test("no HTML injection from collection data, names or server messages", async () => {
  const evil = `<img src=x onerror="window.__xss=1;alert(1)">`;
  const col = (await h.api("/api/collections/posts")).body;
  const fields = col.fields.map((f) => (f.name === "status" ? { ...f, values: [evil, "<script>window.__xss=2</script>", "javascript:alert(3)"] } : f));
  const up = await h.api(`/api/collections/${col.id}`, { method: "PATCH", body: { fields } });
  assert.equal(up.status, 200, JSON.stringify(up.body));
  await h.api(`/api/${encodeURIComponent(evil)}`, { guest: true }); // lands in the logs
  await openEditor(col.id);
  await page.locator('[data-field-type="select"] button:has-text("Options")').click();
  const v = await page.inputValue('label:has-text("Choices") + input');
  assert.ok(v.includes("<img src=x"), `shown as text: ${v}`);
  await page.fill('input[name="name"]', evil);
  await page.click('[data-testid="save-collection"]');
  await page.locator('.field:has(input[name="name"]) [data-testid="field-error"]').waitFor();
  await closeEditor();
  await h.goto(page, "/logs");
  await page.waitForSelector('[data-testid="log-row"]');
  assert.equal(await page.locator('img[src="x"]').count(), 0);
  assert.equal(await page.evaluate(() => window.__xss), undefined);
  assert.deepEqual(dialogs, []);
  assert.deepEqual(page.errors, []);
});

test("indexes: add one and see it saved", async () => {
  const col = (await h.api("/api/collections/posts")).body;
  await openEditor(col.id);
  await page.click('role=tab[name=/Indexes/]');
  await page.fill('label:has-text("Add an index") + textarea', "CREATE INDEX idx_posts_title ON posts (title)");
  await page.click('button:has-text("+ Add index")');
  await page.click('[data-testid="save-collection"]');
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" }); // closes only when saved
  const r = await h.api("/api/collections/posts");
  assert.ok(r.body.indexes.some((i) => i.includes("idx_posts_title")), JSON.stringify(r.body.indexes));
});

test("a relation field to users, with its options", async () => {
  const col = (await h.api("/api/collections/posts")).body;
  const users = (await h.api("/api/collections/users")).body;
  await openEditor(col.id);
  await addField("relation", "author");
  await page.selectOption('label:has-text("Related collection") + select', users.id);
  await page.click('label:has-text("Cascade delete")');
  await page.click('[data-testid="save-collection"]');
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" }); // closes only when saved
  const f = (await h.api("/api/collections/posts")).body.fields.find((x) => x.name === "author");
  assert.equal(f?.type, "relation");
  assert.equal(f.collectionId, users.id);
  assert.equal(f.cascadeDelete, true);
});

test("a field option error opens that field and shows next to the option", async () => {
  const col = (await h.api("/api/collections/posts")).body;
  await openEditor(col.id);
  await addField("select", "mood"); // no choices: the server refuses
  await page.locator('[data-testid="field-card"]').last().locator('button:has-text("Options")').click(); // close it
  await page.click('[data-testid="save-collection"]');
  const err = page.locator('[data-testid="field-card"]:last-child .field:has(label:has-text("Choices")) [data-testid="field-error"]');
  await err.waitFor();
  assert.match(await err.textContent(), /\S/);
  await closeEditor();
  assert.ok(!(await h.api("/api/collections/posts")).body.fields.some((f) => f.name === "mood"));
});

test("a view collection: the server's error on a bad query, then a working one", async () => {
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" });
  await h.goto(page, "/collections/new");
  await page.waitForSelector('[data-testid="collection-editor"]');
  await page.fill('input[name="name"]', "post_titles");
  await page.click('label:has-text("View")');
  await page.fill('label:has-text("SELECT query") + textarea', "SELECT nope FROM nowhere");
  await page.click('[data-testid="save-collection"]');
  const err = page.locator('.field:has(label:has-text("SELECT query")) [data-testid="field-error"]');
  await err.waitFor();
  assert.match(await err.textContent(), /\S/);
  await page.fill('label:has-text("SELECT query") + textarea', "SELECT id, title FROM posts");
  await page.click('[data-testid="save-collection"]');
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" }); // closes only when saved
  const r = await h.api("/api/collections/post_titles");
  assert.equal(r.body.type, "view");
  assert.ok(r.body.fields.some((f) => f.name === "title"));
});

test("auth collection options: turn on OTP and change the auth token duration", async () => {
  const users = (await h.api("/api/collections/users")).body;
  await openEditor(users.id);
  await page.click('role=tab[name="Auth options"]');
  await page.click('label:has-text("Sign in with a one-time code by email")');
  await page.fill('label:has-text("Auth token") + input', "86400");
  assert.deepEqual(await h.axe(page), [], "auth options");
  await h.screenshot(page, "auth-options");
  await page.click('[data-testid="save-collection"]');
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" }); // closes only when saved
  const r = (await h.api("/api/collections/users")).body;
  assert.equal(r.otp.enabled, true);
  assert.equal(r.authToken.duration, 86400);
});

test("delete a collection with the typed confirmation", async () => {
  const col = (await h.api("/api/collections/post_titles")).body;
  await openEditor(col.id);
  await page.click('.modal-foot button:has-text("Delete")');
  await page.waitForSelector('[data-testid="confirm-yes"][disabled]');
  await page.fill("#confirm-typed", "post_titles");
  await page.click('[data-testid="confirm-yes"]');
  await page.waitForSelector('[data-testid="toast"]:has-text("deleted")');
  assert.equal((await h.api("/api/collections/post_titles")).status, 404);
});

test("the sidebar picks up collections changed elsewhere once the window is back in view", async () => {
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" });
  await h.goto(page, "/collections");
  await page.waitForSelector('[data-testid="collection-link"]:has-text("posts")');
  const link = page.locator('[data-testid="collection-link"]:has-text("made_elsewhere")');
  const lists = []; // the dashboard's reads of the collections list
  const onRequest = (r) => { if (r.method() === "GET" && new URL(r.url()).pathname === "/api/collections") lists.push(r.url()); };
  page.on("request", onRequest);
  try {
    const made = await h.api("/api/collections", { method: "POST", body: { name: "made_elsewhere", type: "base", fields: [{ name: "title", type: "text" }] } });
    assert.equal(made.status, 200, JSON.stringify(made.body));
    await page.waitForTimeout(500);
    assert.equal(await link.count(), 0, "no refresh without an event");

    // Coming back to a tab fires visibilitychange and then focus: one refresh serves both.
    await page.evaluate(() => {
      document.dispatchEvent(new Event("visibilitychange"));
      window.dispatchEvent(new Event("focus"));
    });
    await link.waitFor();
    await page.waitForTimeout(600);
    assert.equal(lists.length, 1, lists.join("\n"));

    // Nothing is fetched while the tab is hidden.
    assert.equal((await h.api("/api/collections/made_elsewhere", { method: "DELETE" })).status, 204);
    await page.evaluate(() => {
      Object.defineProperty(document, "visibilityState", { value: "hidden", configurable: true });
      document.dispatchEvent(new Event("visibilitychange"));
      window.dispatchEvent(new Event("focus"));
    });
    await page.waitForTimeout(600);
    assert.equal(lists.length, 1, "nothing fetched while hidden");
    assert.equal(await link.count(), 1);

    // Visible again: the deleted collection leaves the sidebar.
    await page.evaluate(() => {
      delete document.visibilityState;
      document.dispatchEvent(new Event("visibilitychange"));
    });
    await link.waitFor({ state: "detached" });
    assert.equal(lists.length, 2);

    // A focus alone refreshes too (another window was in front).
    const made2 = await h.api("/api/collections", { method: "POST", body: { name: "made_elsewhere", type: "base" } });
    assert.equal(made2.status, 200);
    await page.evaluate(() => window.dispatchEvent(new Event("focus")));
    await link.waitFor();
    assert.deepEqual(page.errors, []);
  } finally {
    page.off("request", onRequest);
  }
});
