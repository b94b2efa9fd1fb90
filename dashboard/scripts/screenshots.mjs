// Seeds a fresh server with sample data and saves the README's screenshots (1280x800 PNG)
// into docs/screenshots/. Uses the e2e harness: FERROBASE_BIN, CHROMIUM_BIN, FERROBASE_PLUGIN_WASM_DIR.
import { join } from "node:path";
import { start, DASH } from "../e2e/harness.mjs";

const out = join(DASH, "../docs/screenshots");
const h = await start({ plugins: ["contract_0_1_0.wasm", "starter_check.wasm"] });
try {
  const api = async (path, body, method = "POST") => {
    const r = await h.api(path, { method, body });
    if (r.status >= 300) throw new Error(`${path}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const users = await api("/api/collections/users", undefined, "GET");
  const people = [];
  for (const [name, email] of [["Ada Lovelace", "ada@example.com"], ["Grace Hopper", "grace@example.com"], ["Alan Turing", "alan@example.com"]])
    people.push(await api("/api/collections/users/records", { name, email, password: "password123", passwordConfirm: "password123", verified: true }));
  const tags = await api("/api/collections", { name: "tags", type: "base", listRule: "", viewRule: "", fields: [{ name: "name", type: "text", required: true, presentable: true }] });
  const tagIds = [];
  for (const t of ["release", "guide", "rust", "sqlite"]) tagIds.push((await api("/api/collections/tags/records", { name: t })).id);
  await api("/api/collections", {
    name: "posts", type: "base", listRule: "", viewRule: "", createRule: '@request.auth.id != ""', updateRule: "author = @request.auth.id", deleteRule: null,
    fields: [
      { name: "title", type: "text", required: true, max: 200, presentable: true },
      { name: "status", type: "select", values: ["draft", "review", "published"], maxSelect: 1 },
      { name: "views", type: "number", onlyInt: true, min: 0 },
      { name: "featured", type: "bool" },
      { name: "author", type: "relation", collectionId: users.id, maxSelect: 1 },
      { name: "tags", type: "relation", collectionId: tags.id, maxSelect: 5 },
      { name: "body", type: "editor" },
      { name: "published", type: "date" },
      { name: "created", type: "autodate", onCreate: true },
      { name: "updated", type: "autodate", onCreate: true, onUpdate: true },
    ],
    indexes: ["CREATE INDEX idx_posts_status ON posts (status)"],
  });
  const titles = [
    ["Ferrobase 1.0 is out", "published", 1840, true], ["Migrating from PocketBase in ten minutes", "published", 920, true],
    ["Writing your first WebAssembly plugin", "published", 610, false], ["Realtime subscriptions under the hood", "review", 0, false],
    ["Backups, restores and S3", "published", 344, false], ["API rules by example", "published", 1205, true],
    ["Indexes the advisor suggested", "draft", 0, false], ["Running on a Raspberry Pi", "draft", 0, false],
  ];
  for (const [i, [title, status, views, featured]] of titles.entries())
    await api("/api/collections/posts/records", {
      title, status, views, featured, author: people[i % 3].id, tags: [tagIds[i % 4], tagIds[(i + 1) % 4]],
      body: `<p>${title}.</p>`, published: status === "published" ? `2026-11-${String(10 + i).padStart(2, "0")} 09:00:00.000Z` : "",
    });
  for (let i = 0; i < 12; i++) await h.api("/api/collections/posts/records?page=1&perPage=5", { guest: true });
  await h.api("/api/collections/posts/records", { guest: true, method: "POST", body: { title: "x" } });
  await h.api("/api/missing", { guest: true });

  const page = await h.newPage();
  await h.signIn(page);
  const posts = await api("/api/collections/posts", undefined, "GET");
  await h.goto(page, `/collections/${posts.id}`);
  await page.waitForSelector("text=Ferrobase 1.0 is out");
  await page.waitForTimeout(300);
  await page.screenshot({ path: join(out, "records.png") });
  await h.goto(page, `/collections/${posts.id}/edit`);
  await page.waitForSelector('[data-testid="collection-editor"][data-version="1"]');
  await page.locator('[data-field-type="select"] button:has-text("Options")').click();
  await page.waitForTimeout(200);
  await page.screenshot({ path: join(out, "collection-editor.png") });
  await page.keyboard.press("Escape");
  await h.goto(page, "/logs");
  await page.waitForSelector('[data-testid="log-row"]');
  await page.waitForTimeout(300);
  await page.screenshot({ path: join(out, "logs.png") });
  await h.goto(page, "/plugins");
  await page.waitForSelector('[data-testid="plugin-card"]');
  await page.waitForTimeout(300);
  await page.screenshot({ path: join(out, "plugins.png") });
  console.log(`screenshots written to ${out}`);
} finally {
  await h.stop();
}
