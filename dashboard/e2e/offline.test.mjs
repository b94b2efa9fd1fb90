import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { start } from "./harness.mjs";

let h;
before(async () => { h = await start(); });
after(async () => { await h?.stop(); });

test("a server that goes away shows a banner, and the dashboard recovers when it returns", async () => {
  const page = await h.newPage();
  await h.signIn(page);
  await h.goto(page, "/settings");
  await page.waitForSelector('[data-testid="app-settings"]');
  await h.stopServer();
  await page.waitForSelector('[data-testid="offline-banner"]', { timeout: 15000 });
  assert.match(await page.textContent('[data-testid="offline-banner"]'), /Can't reach the server/);
  await h.screenshot(page, "offline");
  await h.startServer();
  await page.waitForSelector('[data-testid="offline-banner"]', { state: "detached", timeout: 15000 });
  // still signed in and working
  await h.goto(page, "/logs");
  await page.waitForSelector('[data-testid="log-row"]');
  assert.deepEqual(page.errors, []);
});
