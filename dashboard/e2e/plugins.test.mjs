import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { start } from "./harness.mjs";

let h, page;
before(async () => {
  h = await start({ plugins: ["contract_0_1_0.wasm"] });
  page = await h.newPage();
  await h.signIn(page);
});
after(async () => { await h?.stop(); });

test("a loaded plugin is listed with its state, version and grants", async () => {
  await h.goto(page, "/plugins");
  const card = page.locator('[data-testid="plugin-card"][data-plugin="contract-0-1-0"]');
  await card.waitFor();
  const text = await card.textContent();
  assert.match(text, /loaded/);
  assert.match(text, /v0\.1\.0/);
  assert.match(text, /db:read/);
  assert.deepEqual(await h.axe(page), [], "plugins");
});

test("hot reload shows up on the open plugins page", async () => {
  await page.waitForSelector('[data-testid="history-row"]');
  const before = await page.locator('[data-testid="history-row"]').count();
  h.addPlugin("starter_check.wasm");
  await page.locator('[data-testid="plugin-card"][data-plugin="starter-check"]').waitFor({ timeout: 15000 });
  await page.waitForSelector('[data-testid="toast"]:has-text("starter_check.wasm: loaded")');
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid="history-row"]').length > n, before);
  assert.match(await page.locator('[data-testid="history-row"]').first().textContent(), /starter_check\.wasm/);
  await h.screenshot(page, "plugins");
});
