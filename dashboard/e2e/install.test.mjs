import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { start, EMAIL, PASSWORD } from "./harness.mjs";

let h;
before(async () => { h = await start({ superuser: false }); });
after(async () => { await h?.stop(); });

test("first run: the installer link creates the superuser and signs in", async () => {
  const link = h.installLink();
  assert.ok(link, `no installer link in stdout:\n${h.stdout}`);
  const page = await h.newPage();
  await page.goto(link);
  await page.waitForSelector("text=Create your superuser");
  assert.deepEqual(await h.axe(page), []);
  await h.screenshot(page, "install");
  await page.fill('input[name="email"]', EMAIL);
  await page.fill('input[name="password"]', PASSWORD);
  await page.fill('input[name="passwordConfirm"]', PASSWORD);
  await page.click('button[type="submit"]');
  await page.waitForSelector('nav[aria-label="Main"]');
  await page.waitForFunction(() => location.hash.startsWith("#/collections"));
  const r = await h.api("/api/collections/_superusers/records");
  assert.equal(r.status, 200);
  assert.deepEqual(r.body.items.map((x) => x.email), [EMAIL]);
});

test("an invalid installer token shows the CLI alternative", async () => {
  const page = await h.newPage();
  await h.goto(page, "/pbinstall/not.a.token");
  await page.waitForSelector('[data-testid="install-expired"]');
  assert.match(await page.textContent('[data-testid="install-expired"]'), /superuser upsert/);
});

