// The records screens in a real Chromium against a real ferrobase: the table (filter, sort,
// columns, values rendered safely), the record form (create with a file upload, edit, a
// validation error next to its field), delete and bulk delete, live updates through realtime,
// and axe on the table and the form.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { deflateSync } from "node:zlib";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

// In a worktree without its own build, use the main checkout's binary when it is there.
const here = dirname(fileURLToPath(import.meta.url));
if (!process.env.FERROBASE_BIN && !existsSync(resolve(here, "../../target/release/ferrobase"))) {
  for (const p of ["/work/main/target/release/ferrobase"]) if (existsSync(p)) process.env.FERROBASE_BIN = p;
}
const { start } = await import("./harness.mjs");

let h;
let page;
let tags; // the related collection
const T = (id) => `[data-testid="${id}"]`;

// A small valid PNG (solid color), for the upload and its thumbnail.
function crc32(buf) {
  let c, crc = 0xffffffff;
  for (let n = 0; n < buf.length; n++) {
    c = (crc ^ buf[n]) & 0xff;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    crc = (crc >>> 8) ^ c;
  }
  return (crc ^ 0xffffffff) >>> 0;
}
function png(w, h, [r, g, b]) {
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(td));
    return Buffer.concat([len, td, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8; ihdr[9] = 2; ihdr[10] = 0; ihdr[11] = 0; ihdr[12] = 0;
  const row = Buffer.alloc(1 + w * 3);
  for (let x = 0; x < w; x++) row.set([r, g, b], 1 + x * 3);
  const raw = Buffer.concat(Array.from({ length: h }, () => row));
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", ihdr),
    chunk("IDAT", deflateSync(raw)),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}

async function api(path, opts) {
  const r = await h.api(path, opts);
  if (r.status >= 400) throw new Error(`${opts?.method ?? "GET"} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}
const createPost = (body) => api("/api/collections/posts/records", { method: "POST", body });

/** The texts of one column, top to bottom. */
const column = (name) =>
  page.$$eval(`${T("records-table")} tbody td[data-field="${name}"]`, (tds) => tds.map((td) => td.textContent.trim()));
/** Wait until the table's rows satisfy `pred(titles)`. */
async function waitTitles(pred, what) {
  const deadline = Date.now() + 8000;
  let last = [];
  while (Date.now() < deadline) {
    last = await column("title").catch(() => []);
    if (pred(last)) return last;
    await page.waitForTimeout(50);
  }
  assert.fail(`table titles never matched (${what}): ${JSON.stringify(last)}`);
}
const row = (title) => page.locator(`${T("records-table")} tbody tr`, { has: page.locator(`td[data-field="title"]`, { hasText: title }) });
const dialog = () => page.locator('[role="dialog"]').first();
/** The .field element whose label starts with `name`. */
const fieldBox = (name) =>
  dialog().locator(".field, fieldset").filter({ has: page.locator(`label, legend`).filter({ hasText: new RegExp(`^${name}`) }) }).first();

before(async () => {
  h = await start();
  tags = await api("/api/collections", {
    method: "POST",
    body: { name: "tags", type: "base", fields: [{ name: "name", type: "text", presentable: true }] },
  });
  await api("/api/collections", {
    method: "POST",
    body: {
      name: "posts",
      type: "base",
      fields: [
        { name: "title", type: "text", required: true, max: 300 },
        { name: "views", type: "number", min: 0, max: 100 },
        { name: "published", type: "bool" },
        { name: "when", type: "date" },
        { name: "kind", type: "select", values: ["news", "blog", "misc"], maxSelect: 1 },
        { name: "meta", type: "json" },
        { name: "cover", type: "file", maxSelect: 1, thumbs: ["100x100"] },
        { name: "tag", type: "relation", collectionId: tags.id, maxSelect: 1 },
        { name: "docs", type: "file", maxSelect: 3, protected: true, thumbs: ["100x100"] },
        { name: "labels", type: "select", values: ["a", "b", "c"], maxSelect: 3 },
        { name: "tagset", type: "relation", collectionId: tags.id, maxSelect: 2 },
        { name: "loc", type: "geoPoint" },
        { name: "mail", type: "email" },
        { name: "body", type: "editor" },
        { name: "site", type: "url" },
        { name: "link", type: "text" },
        { name: "created", type: "autodate", onCreate: true },
        { name: "updated", type: "autodate", onCreate: true, onUpdate: true },
      ],
    },
  });
  for (const name of ["red", "green", "blue"]) await api("/api/collections/tags/records", { method: "POST", body: { name } });
  await createPost({ title: "Alpha", views: 10, kind: "news", published: true, meta: { a: 1 }, site: "https://example.com/a" });
  await createPost({ title: "Bravo", views: 20, kind: "blog" });
  await createPost({ title: "Charlie", views: 30, kind: "misc" });
  await createPost({ title: '<img src=x onerror="window.__xss=1">', views: 1, link: "javascript:alert(1)" });
  await createPost({ title: "<script>window.__xss=1</script>", views: 2, link: "javascript:window.__xss=1" });
  await createPost({ title: "Long", views: 3, link: "日本語のテキスト🚀 ".repeat(400) });
  page = await h.newPage();
  // A time zone away from UTC, so local display and UTC storage differ.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Emulation.setTimezoneOverride", { timezoneId: "America/New_York" });
  await h.signIn(page);
});
after(async () => {
  await h?.stop();
});

test("records: table, form, filter, sort, delete, realtime, safe rendering", async (t) => {
  await t.test("the table lists the records, values rendered as text", async () => {
    await h.goto(page, "/collections/posts");
    await page.waitForSelector(T("records-table"));
    await waitTitles((x) => x.length === 6, "6 seeded rows");
    assert.match(await page.textContent(T("records-total")), /of 6/);
    // The injection attempts are shown as their literal text, nothing ran.
    const titles = await column("title");
    assert.ok(titles.includes('<img src=x onerror="window.__xss=1">'), JSON.stringify(titles));
    assert.ok(titles.includes("<script>window.__xss=1</script>"), JSON.stringify(titles));
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    assert.equal(await page.locator(`${T("records-table")} img[src="x"]`).count(), 0);
    assert.equal(await page.locator(`${T("records-table")} script`).count(), 0);
    // javascript: values are never links; http(s) urls are.
    const links = await column("link");
    assert.ok(links.includes("javascript:alert(1)"));
    // very long unicode text is cut short in the cell, the start kept intact
    const long = links.find((x) => x.startsWith("日本語のテキスト🚀"));
    assert.ok(long && long.length <= 80 && long.endsWith("…"), long);
    assert.equal(await page.locator('a[href^="javascript:"]').count(), 0);
    assert.equal(await page.locator(`${T("records-table")} a[href="https://example.com/a"]`).count(), 1);
    // dates: local time shown, the UTC value in the title
    const created = page.locator(`${T("records-table")} td[data-field="created"] time`).first();
    assert.match(await created.getAttribute("title"), /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z UTC$/);
    // bool badge, select chip
    assert.equal(await row("Alpha").locator('td[data-field="published"]').textContent(), "True");
    assert.equal(await row("Bravo").locator('td[data-field="kind"] .rec-chip').textContent(), "blog");
    assert.deepEqual(await h.axe(page), []);
    await h.screenshot(page, "records-table");
  });

  await t.test("a validation error is shown next to its field", async () => {
    await page.click(T("record-new"));
    await dialog().waitFor();
    await fieldBox("views").locator("input").fill("500"); // max is 100
    await page.click(T("record-save"));
    const viewsErr = fieldBox("views").locator(T("field-error"));
    await viewsErr.waitFor();
    assert.match(await viewsErr.textContent(), /100|less|greater|max/i);
    const titleErr = fieldBox("title").locator(T("field-error")); // required, left empty
    await titleErr.waitFor();
    assert.match(await titleErr.textContent(), /blank|required|empty/i);
    // Typing into the field clears its error.
    await fieldBox("views").locator("input").fill("5");
    await page.waitForFunction(() => ![...document.querySelectorAll('[role=dialog] [data-testid="field-error"]')].some((e) => /100|less|greater/i.test(e.textContent)));
    // Closing a changed form asks first.
    await page.keyboard.press("Escape");
    await page.getByText("Discard unsaved changes?").waitFor();
    await page.click(T("confirm-yes"));
    await page.locator('[role="dialog"]').waitFor({ state: "detached" });
  });

  await t.test("create a record through the form, with a file upload; its thumbnail loads", async () => {
    await page.click(T("record-new"));
    await dialog().waitFor();
    await fieldBox("title").locator("input").fill("Delta from the form");
    await fieldBox("views").locator("input").fill("42");
    await fieldBox("published").locator("input").check();
    await fieldBox("when").locator("input").fill("2024-03-05T14:30:00");
    // the UTC value of the local input is shown below it
    const utc = "2024-03-05 19:30:00.000Z"; // 14:30 in New York (EST, UTC-5)
    await fieldBox("when").getByText(`UTC: ${utc}`).waitFor();
    await fieldBox("kind").locator("select").selectOption("blog");
    await fieldBox("meta").locator("textarea").fill("{bad json");
    await fieldBox("meta").getByText(/Invalid JSON/).waitFor();
    await fieldBox("meta").locator("textarea").fill('{"stars": 5}');
    await fieldBox("cover").locator('input[type="file"]').setInputFiles({ name: "cover.png", mimeType: "image/png", buffer: png(120, 80, [200, 40, 40]) });
    await fieldBox("cover").getByText("cover.png").waitFor();
    // relation: search the target collection and pick one
    const rel = fieldBox("tag");
    await rel.locator('input[role="combobox"]').fill("gre");
    await rel.locator(".rec-rel-opt", { hasText: "green" }).click();
    await rel.locator(".rec-chips-edit", { hasText: "green" }).waitFor();
    // multiple relation (max 2): a third pick is disabled
    const set = fieldBox("tagset");
    await set.locator('input[role="combobox"]').click();
    await set.locator(".rec-rel-opt", { hasText: "red" }).click();
    await set.locator(".rec-rel-opt", { hasText: "blue" }).click();
    assert.equal(await set.locator(".rec-rel-opt", { hasText: "green" }).isDisabled(), true);
    await set.getByRole("button", { name: "Done" }).click();
    await fieldBox("labels").getByLabel("a", { exact: true }).check();
    await fieldBox("labels").getByLabel("c", { exact: true }).check();
    await fieldBox("loc").getByLabel("Longitude").fill("12.5");
    await fieldBox("loc").getByLabel("Latitude").fill("41.9");
    await fieldBox("mail").locator("input").fill("delta@example.com");
    assert.deepEqual(await h.axe(page), []);
    await dialog().locator(".modal-body").evaluate((e) => (e.scrollTop = 0));
    await h.screenshot(page, "records-form");
    await page.click(T("record-save"));
    await dialog().waitFor({ state: "detached" });
    await waitTitles((x) => x.includes("Delta from the form"), "the new record");
    const r = row("Delta from the form");
    assert.equal(await r.locator('td[data-field="views"]').textContent(), "42");
    assert.equal(await r.locator('td[data-field="tag"]').textContent(), "green");
    const when = r.locator('td[data-field="when"] time');
    assert.equal(await when.getAttribute("title"), `${utc} UTC`);
    assert.match(await when.textContent(), /0?2:30:00\s*PM|14:30:00/);
    const img = r.locator('td[data-field="cover"] img');
    await img.waitFor();
    assert.match(await img.getAttribute("src"), /thumb=100x100/);
    await page.waitForFunction(
      (id) => {
        const el = document.querySelector(`tr[data-id="${id}"] td[data-field="cover"] img`);
        return el && el.complete && el.naturalWidth > 0;
      },
      await r.getAttribute("data-id"),
    );
    // stored as sent
    const stored = (await api(`/api/collections/posts/records?filter=${encodeURIComponent('title="Delta from the form"')}`)).items[0];
    assert.equal(stored.when, utc);
    assert.deepEqual(stored.meta, { stars: 5 });
    assert.equal(stored.published, true);
    assert.match(stored.cover, /^cover_\w+\.png$/);
    assert.deepEqual(stored.labels, ["a", "c"]);
    assert.equal(stored.tagset.length, 2);
    assert.deepEqual(stored.loc, { lon: 12.5, lat: 41.9 });
    assert.equal(stored.mail, "delta@example.com");
    assert.equal(await r.locator('td[data-field="tagset"]').textContent(), "redblue");
    assert.equal(await r.locator('td[data-field="labels"]').textContent(), "ac");
  });

  await t.test("edit a record (opened from the keyboard)", async () => {
    await row("Bravo").locator(".rec-open").focus();
    await page.keyboard.press("Enter");
    await dialog().waitFor();
    // focus moves into the form (once the record it reloads has arrived)
    await page.waitForFunction(() => !!document.activeElement?.closest('[role="dialog"]'), null, { timeout: 10000 });
    await fieldBox("title").locator("input").fill("Bravo edited");
    await page.click(T("record-save"));
    await dialog().waitFor({ state: "detached" });
    await waitTitles((x) => x.includes("Bravo edited") && !x.includes("Bravo"), "the edited title");
  });

  await t.test("filter: a valid filter narrows the rows, an invalid one shows the server's error", async () => {
    await page.fill(T("records-filter"), "views >= 20 && views <= 42");
    await page.press(T("records-filter"), "Enter");
    const got = await waitTitles((x) => x.length === 3, "filtered rows");
    assert.deepEqual([...got].sort(), ["Bravo edited", "Charlie", "Delta from the form"]);
    await page.fill(T("records-filter"), "views >>> 1");
    await page.press(T("records-filter"), "Enter");
    const err = await page.waitForSelector(T("filter-error"));
    const server = await h.api(`/api/collections/posts/records?filter=${encodeURIComponent("views >>> 1")}`);
    assert.equal(server.status, 400);
    assert.ok((await err.textContent()).includes(server.body.message), `${await err.textContent()} vs ${server.body.message}`);
    await page.fill(T("records-filter"), "");
    await page.press(T("records-filter"), "Enter");
    await page.waitForSelector(T("filter-error"), { state: "detached" });
    await waitTitles((x) => x.length === 7, "all rows again");
  });

  await t.test("sort by clicking a column header", async () => {
    await page.click(T("sort-views")); // descending first
    await waitTitles((x) => x[0] === "Delta from the form", "views descending");
    assert.equal(await page.getAttribute('th:has([data-testid="sort-views"])', "aria-sort"), "descending");
    await page.focus(T("sort-views"));
    await page.keyboard.press("Enter"); // keyboard: ascending
    await waitTitles((x) => x[0] === '<img src=x onerror="window.__xss=1">', "views ascending");
    assert.equal(await page.getAttribute('th:has([data-testid="sort-views"])', "aria-sort"), "ascending");
    // the sort is kept in the address: a reload shows the same order
    assert.match(page.url(), /[?&]sort=views(&|$)/);
    await page.reload();
    await waitTitles((x) => x[0] === '<img src=x onerror="window.__xss=1">', "views ascending after a reload");
    assert.equal(await page.getAttribute('th:has([data-testid="sort-views"])', "aria-sort"), "ascending");
  });

  await t.test("the column picker hides a column and remembers it", async () => {
    await page.click(T("columns-button"));
    await page.locator(".rec-cols-item", { hasText: "meta" }).locator("input").uncheck();
    await page.waitForSelector(`${T("records-table")} th:has([data-testid="sort-meta"])`, { state: "detached" });
    await page.reload();
    await page.waitForSelector(`${T("records-table")} tbody tr`);
    assert.equal(await page.locator(T("sort-meta")).count(), 0);
    assert.equal(await page.locator(T("sort-title")).count(), 1);
  });

  await t.test("a record created through the API appears without a reload (realtime)", async () => {
    await page.waitForSelector(".rec-live");
    await createPost({ title: "Echo via the API", views: 7 });
    await waitTitles((x) => x.includes("Echo via the API"), "the realtime row");
    assert.equal(await page.evaluate(() => window.__xss), undefined);
  });

  await t.test("multiple protected files: upload two (thumbnails through a file token), remove one", async () => {
    await row("Delta from the form").locator('td[data-field="views"]').click();
    await dialog().waitFor();
    await fieldBox("docs").locator('input[type="file"]').setInputFiles([
      { name: "one.png", mimeType: "image/png", buffer: png(60, 60, [20, 120, 200]) },
      { name: "two.png", mimeType: "image/png", buffer: png(60, 60, [20, 200, 120]) },
    ]);
    await fieldBox("docs").getByText("2 of max 3 files").waitFor();
    await page.click(T("record-save"));
    await dialog().waitFor({ state: "detached" });
    const id = await row("Delta from the form").getAttribute("data-id");
    await page.waitForFunction((id) => {
      const imgs = [...document.querySelectorAll(`tr[data-id="${id}"] td[data-field="docs"] img`)];
      return imgs.length === 2 && imgs.every((i) => i.complete && i.naturalWidth > 0 && /[?&]token=/.test(i.src));
    }, id);
    let stored = await api(`/api/collections/posts/records/${id}`);
    assert.equal(stored.docs.length, 2);
    const [keep, drop] = stored.docs;
    await row("Delta from the form").locator('td[data-field="views"]').click();
    await dialog().waitFor();
    await fieldBox("docs").getByRole("button", { name: `Remove file ${drop}` }).click();
    await fieldBox("docs").getByText("will be deleted").waitFor();
    await page.click(T("record-save"));
    await dialog().waitFor({ state: "detached" });
    await page.waitForFunction((id) => document.querySelectorAll(`tr[data-id="${id}"] td[data-field="docs"] img`).length === 1, id);
    stored = await api(`/api/collections/posts/records/${id}`);
    assert.deepEqual(stored.docs, [keep]);
    assert.equal(stored.cover.startsWith("cover_"), true, "the other file field is untouched");
  });

  await t.test("editor field: formatting from the toolbar, pasted HTML sanitized", async () => {
    await row("Delta from the form").locator('td[data-field="views"]').click();
    await dialog().waitFor();
    const area = fieldBox("body").locator('[contenteditable]');
    await area.click();
    await page.keyboard.type("Hello ");
    await fieldBox("body").getByRole("button", { name: "Bold" }).click();
    await page.keyboard.type("world");
    await fieldBox("body").getByRole("button", { name: "Bold" }).click();
    await page.keyboard.type(" see ");
    // a link from the toolbar: javascript: is refused, https is inserted
    await fieldBox("body").getByRole("button", { name: "Insert link" }).click();
    const href = fieldBox("body").getByLabel("Link address");
    await href.fill("javascript:alert(1)");
    await href.press("Enter");
    await fieldBox("body").getByText("Only http, https and mailto links are allowed.").waitFor();
    await href.fill("https://example.net/");
    await href.press("Enter");
    await area.locator('a[href="https://example.net/"]').waitFor();
    await area.press("End");
    await area.evaluate((el) => {
      const dt = new DataTransfer();
      dt.setData("text/html", '<img src=x onerror="window.__xss=1"><a href="javascript:alert(1)">bad</a><script>window.__xss=1<\/script><i onclick="x()">ok</i><a href="https://example.org/">fine</a>');
      dt.setData("text/plain", "bad ok fine");
      el.dispatchEvent(new ClipboardEvent("paste", { clipboardData: dt, bubbles: true, cancelable: true }));
    });
    assert.equal(await area.locator("img, script, [onclick], [onerror]").count(), 0);
    await page.click(T("record-save"));
    await dialog().waitFor({ state: "detached" });
    const id = await row("Delta from the form").getAttribute("data-id");
    const body = (await api(`/api/collections/posts/records/${id}`)).body;
    assert.match(body, /^Hello <(b|strong)>world<\/\1>\ssee\s<a href="https:\/\/example.net\/"[^>]*>https:\/\/example.net\/<\/a>/, body);
    assert.match(body, /<i>ok<\/i>/, body);
    assert.match(body, /<a href="https:\/\/example.org\/"[^>]*>fine<\/a>/, body);
    for (const bad of ["<img", "<script", "onerror", "onclick", "javascript:"]) assert.ok(!body.includes(bad), `${bad} in ${body}`);
    assert.equal(await page.evaluate(() => window.__xss), undefined);
  });

  await t.test("stored editor HTML with scripts is shown sanitized in the form", async () => {
    const alpha = (await api(`/api/collections/posts/records?filter=${encodeURIComponent('title="Alpha"')}`)).items[0];
    const nasty =
      '<p>keep <b>this</b></p><img src=x onerror="window.__xss=1"><svg onload="window.__xss=1"><circle/></svg>' +
      '<iframe srcdoc="<script>parent.__xss=1<\/script>"></iframe><a href=" JaVaScRiPt:window.__xss=1">js</a>' +
      '<a href="data:text/html,<script>alert(1)<\/script>">data</a><p style="x" onclick="window.__xss=1">para</p>' +
      '<script>window.__xss=1<\/script><a href="https://example.com/ok">ok</a>';
    await api(`/api/collections/posts/records/${alpha.id}`, { method: "PATCH", body: { body: nasty } });
    await row("Alpha").locator('td[data-field="views"]').click();
    await dialog().waitFor();
    const area = fieldBox("body").locator("[contenteditable]");
    await area.getByText("this").waitFor();
    assert.equal(await area.locator("img, svg, iframe, script, [onclick], [onerror], [onload], [style]").count(), 0);
    const hrefs = await area.locator("a").evaluateAll((as) => as.map((a) => a.getAttribute("href")));
    assert.deepEqual(hrefs, [null, null, "https://example.com/ok"]);
    assert.match(await area.textContent(), /keep this.*js.*data.*para.*ok/);
    await page.keyboard.press("Escape"); // nothing changed: closes without asking
    await page.locator('[role="dialog"]').waitFor({ state: "detached" });
    assert.equal(await page.evaluate(() => window.__xss), undefined);
  });

  await t.test("delete one record, then bulk delete two", async () => {
    await row("Charlie").locator('td[data-field="views"]').click();
    await dialog().waitFor();
    await page.click(T("record-delete"));
    await page.click(T("confirm-yes"));
    await waitTitles((x) => !x.includes("Charlie") && x.length === 7, "Charlie deleted");
    await row("Alpha").locator('input[type="checkbox"]').check();
    await row("Echo via the API").locator('input[type="checkbox"]').check();
    await page.click(T("bulk-delete"));
    await page.click(T("confirm-yes"));
    await waitTitles((x) => x.length === 5 && !x.includes("Alpha") && !x.includes("Echo via the API"), "bulk deleted");
    const left = await api("/api/collections/posts/records?perPage=50");
    assert.equal(left.totalItems, 5);
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    assert.deepEqual(page.errors, []);
  });

  await t.test("pagination and per-page; select a whole page and delete it in one batch", async () => {
    for (let i = 0; i < 22; i++) await api("/api/collections/tags/records", { method: "POST", body: { name: `tag ${String(i).padStart(2, "0")}` } });
    await api("/api/settings", { method: "PATCH", body: { batch: { enabled: true, maxRequests: 50 } } });
    await h.goto(page, "/collections/tags");
    await page.waitForSelector(`${T("records-table")} tbody tr`);
    await page.selectOption(".rec-pager select", "10");
    await page.waitForFunction(() => /1–10 of 25/.test(document.querySelector('[data-testid="records-total"]').textContent));
    assert.equal(await page.locator(`${T("records-table")} tbody tr`).count(), 10);
    await page.getByRole("button", { name: "Next page" }).click();
    await page.waitForFunction(() => /11–20 of 25/.test(document.querySelector('[data-testid="records-total"]').textContent));
    await page.getByRole("button", { name: "Next page" }).click();
    await page.waitForFunction(() => /21–25 of 25/.test(document.querySelector('[data-testid="records-total"]').textContent));
    assert.equal(await page.locator(`${T("records-table")} tbody tr`).count(), 5);
    assert.equal(await page.getByRole("button", { name: "Next page" }).isDisabled(), true);
    await page.getByRole("button", { name: "Previous page" }).click();
    await page.waitForFunction(() => /11–20 of 25/.test(document.querySelector('[data-testid="records-total"]').textContent));
    const batches = [];
    page.on("request", (r) => r.url().endsWith("/api/batch") && batches.push(r.method()));
    await page.getByLabel("Select all records on this page").check();
    await page.getByText("10 selected").waitFor();
    await page.click(T("bulk-delete"));
    await page.click(T("confirm-yes"));
    await page.waitForFunction(() => /of 15$/.test(document.querySelector('[data-testid="records-total"]').textContent.trim()));
    assert.deepEqual(batches, ["POST"]);
    assert.equal((await api("/api/collections/tags/records?perPage=1")).totalItems, 15);
  });

  await t.test("a server that goes away: the table says so, and recovers (realtime too)", async () => {
    await h.goto(page, "/collections/tags");
    await page.waitForSelector(`${T("records-table")} tbody tr`);
    await page.waitForSelector(".rec-live");
    await h.stopServer();
    await page.getByRole("button", { name: "Refresh records" }).click();
    const err = page.locator(".rec-view > .alert-error");
    await err.waitFor();
    assert.match(await err.textContent(), /reach|server|fetch|connect/i);
    await h.startServer();
    // Retry (the view may already have recovered by itself when the shell saw the server back).
    await page.getByRole("button", { name: "Retry" }).click({ timeout: 2000 }).catch(() => {});
    await err.waitFor({ state: "detached" });
    await page.selectOption(".rec-pager select", "100");
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="records-table"] tbody tr').length === 15);
    // The SDK reconnects the realtime stream by itself; new records show up again.
    const deadline = Date.now() + 15000;
    let seen = false;
    for (let i = 0; !seen && Date.now() < deadline; i++) {
      await api("/api/collections/tags/records", { method: "POST", body: { name: `after restart ${i}` } });
      seen = await page
        .locator(`${T("records-table")} td[data-field="name"]`, { hasText: `after restart ${i}` })
        .waitFor({ timeout: 1500 })
        .then(() => true, () => false);
    }
    assert.ok(seen, "no realtime update after the server came back");
  });

  await t.test("a view collection is listed read-only", async () => {
    await api("/api/collections", {
      method: "POST",
      body: { name: "post_views", type: "view", viewQuery: "SELECT id, title, views FROM posts WHERE views > 15" },
    });
    await h.goto(page, "/collections/post_views");
    await page.reload(); // the shell loads the list of collections once
    await page.waitForSelector(`${T("records-table")} tbody tr`);
    assert.deepEqual([...(await column("title"))].sort(), ["Bravo edited", "Delta from the form"]);
    assert.equal(await page.locator(T("record-new")).count(), 0);
    assert.equal(await page.locator(`${T("records-table")} input[type="checkbox"]`).count(), 0);
    await page.locator(`${T("records-table")} tbody tr`).first().locator('td[data-field="views"]').click();
    await dialog().getByText("View collections are read-only.").waitFor();
    assert.equal(await dialog().locator("input, textarea, [contenteditable]").count(), 0);
    await page.keyboard.press("Escape");
    await page.locator('[role="dialog"]').waitFor({ state: "detached" });
  });

  await t.test("auth records: password confirm error, verification state, impersonate", async () => {
    await h.goto(page, "/collections/users");
    await page.waitForSelector(`${T("records-table")}`);
    await page.click(T("record-new"));
    await dialog().waitFor();
    await fieldBox("email").locator("input").fill("ann@example.com");
    const pw = dialog().getByLabel(/^Password\s*\*?$/);
    const pwc = dialog().getByLabel(/^Password confirm\s*\*?$/);
    await pw.fill("a-long-password-1");
    await pwc.fill("something-else-2");
    await page.click(T("record-save"));
    await dialog().locator(".field", { has: page.getByLabel(/^Password confirm\s*\*?$/) }).locator(T("field-error")).waitFor();
    await pwc.fill("a-long-password-1");
    await page.click(T("record-save"));
    await dialog().waitFor({ state: "detached" });
    const r = page.locator(`${T("records-table")} tbody tr`, { hasText: "ann@example.com" });
    await r.waitFor();
    const uid = await r.getAttribute("data-id");
    const users = await api("/api/collections/users");
    await api("/api/collections/_externalAuths/records", {
      method: "POST",
      body: { collectionRef: users.id, recordRef: uid, provider: "github", providerId: "gh-4242" },
    });
    await r.locator('td[data-field="verified"]').click();
    await dialog().waitFor();
    await dialog().getByText("Not verified").waitFor();
    await dialog().locator(".rec-oauth").getByText("gh-4242").waitFor();
    await dialog().locator(".rec-oauth").getByRole("button", { name: "Unlink" }).click();
    await page.click(T("confirm-yes"));
    await dialog().locator(".rec-oauth").getByText("None.").waitFor();
    const links = await api(`/api/collections/_externalAuths/records?filter=${encodeURIComponent(`recordRef="${uid}"`)}`);
    assert.equal(links.totalItems, 0);
    await dialog().getByRole("button", { name: "Impersonate" }).click();
    const tok = dialog().locator(".rec-token textarea");
    await tok.waitFor();
    const token = await tok.inputValue();
    assert.match(token, /^[\w-]+\.[\w-]+\.[\w-]+$/);
    // The token acts as the user (users' default viewRule is `id = @request.auth.id`); an
    // impersonation token is not refreshable, as in PocketBase.
    const me = await h.api(`/api/collections/users/records/${uid}`, { guest: true, headers: { authorization: token } });
    assert.equal(me.status, 200);
    assert.equal(me.body.email, "ann@example.com");
    await dialog().getByRole("button", { name: "Send verification" }).click();
    await dialog().locator(".rec-auth [role=status], .rec-auth [role=alert]").waitFor();
    assert.deepEqual(await h.axe(page), []);
    await h.screenshot(page, "records-auth");
    await page.keyboard.press("Escape");
    assert.deepEqual(page.errors, []);
  });
});
