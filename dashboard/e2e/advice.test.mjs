import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { start } from "./harness.mjs";

let h;
before(async () => { h = await start({ config: "[advisor]\nscan_threshold = 1\n" }); });
after(async () => { await h?.stop(); });

test("index advice is shown in the editor and applied through a collection update", async () => {
  const c = await h.api("/api/collections", { method: "POST", body: { name: "items", type: "base", listRule: "", fields: [{ name: "views", type: "number" }] } });
  assert.equal(c.status, 200, JSON.stringify(c.body));
  for (let i = 0; i < 20; i++) await h.api("/api/collections/items/records", { method: "POST", body: { views: i } });
  for (let i = 0; i < 3; i++) await h.api(`/api/collections/items/records?filter=${encodeURIComponent("views > 10")}`);
  const adv = (await h.api("/api/collections/meta/index-advice")).body;
  const one = adv.find((a) => a.collection === "items" && a.index);
  assert.ok(one, JSON.stringify(adv));

  const page = await h.newPage();
  await h.signIn(page);
  await h.goto(page, `/collections/${c.body.id}/edit`);
  await page.waitForSelector('[data-testid="collection-editor"][data-version="1"]');
  await page.click('role=tab[name=/Indexes/]');
  const card = page.locator('[data-testid="index-advice"]:has(button:has-text("Apply"))').first();
  await card.waitFor();
  assert.match(await card.textContent(), /views/);
  assert.deepEqual(await h.axe(page), [], "indexes tab");
  await h.screenshot(page, "index-advice");
  await card.locator('button:has-text("Apply")').click();
  await page.click('[data-testid="save-collection"]');
  await page.waitForSelector('[data-testid="collection-editor"]', { state: "detached" }); // closes only when saved
  const col = (await h.api("/api/collections/items")).body;
  assert.ok(col.indexes.includes(one.index), JSON.stringify(col.indexes));
});
