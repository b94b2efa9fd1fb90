// Settings, backups, crons and logs.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { start } from "./harness.mjs";

let h, page;
before(async () => {
  h = await start();
  page = await h.newPage();
  await h.signIn(page);
});
after(async () => { await h?.stop(); });

test("application settings are saved", async () => {
  await h.goto(page, "/settings");
  await page.waitForSelector('[data-testid="app-settings"]');
  assert.deepEqual(await h.axe(page), [], "settings");
  await page.fill('input[name="appName"]', "Acme e2e");
  await page.click('button:has-text("+ Add rule")');
  await page.fill('input[id][class*="mono"] >> nth=-1', "/api/e2e");
  await page.click('button:has-text("Save changes")');
  await page.waitForSelector('[data-testid="toast"]:has-text("Settings saved")');
  await page.waitForFunction(() => document.title === "Settings · Acme e2e");
  await h.screenshot(page, "settings");
  const s = (await h.api("/api/settings")).body;
  assert.equal(s.meta.appName, "Acme e2e");
  assert.ok(s.rateLimits.rules.some((r) => r.label === "/api/e2e"), JSON.stringify(s.rateLimits));
});

test("a settings validation error is shown next to its field", async () => {
  await h.goto(page, "/settings");
  await page.waitForSelector('[data-testid="app-settings"]');
  await page.fill('input[name="appName"]', "");
  await page.click('button:has-text("Save changes")');
  const err = page.locator('.field:has(input[name="appName"]) [data-testid="field-error"]');
  await err.waitFor();
  assert.match(await err.textContent(), /\S/);
  assert.equal((await h.api("/api/settings")).body.meta.appName, "Acme e2e");
});

test("hide controls: the new-collection button goes away", async () => {
  await h.goto(page, "/collections");
  await page.waitForSelector('[data-testid="new-collection"]');
  await h.goto(page, "/settings");
  await page.waitForSelector('[data-testid="app-settings"]');
  await page.click('label:has-text("Hide collection create and edit controls")');
  await page.click('button:has-text("Save changes")');
  await page.waitForSelector('[data-testid="toast"]:has-text("Settings saved")');
  await h.goto(page, "/collections");
  await page.waitForSelector('[data-testid="collection-link"]');
  await page.waitForSelector('[data-testid="new-collection"]', { state: "detached" });
  assert.equal((await h.api("/api/settings")).body.meta.hideControls, true);
  await h.api("/api/settings", { method: "PATCH", body: { meta: { hideControls: false } } });
});

test("mail settings page: SMTP fields and the test send", async () => {
  await h.goto(page, "/settings/mail");
  await page.waitForSelector('[data-testid="mail-settings"]');
  await page.click('label:has-text("Use SMTP")');
  await page.waitForSelector('label:has-text("Host")');
  assert.deepEqual(await h.axe(page), [], "mail settings");
  await page.click('label:has-text("Use SMTP")'); // back off: the server logs unsent mail
  await page.fill('input[name="testTo"]', "mail-test@example.com");
  await page.click('button:has-text("Send test email")');
  await page.waitForSelector('[data-testid="toast"]:has-text("Test email sent to mail-test@example.com")');
  assert.match(h.stdout, /to=mail-test@example\.com/);
});

test("files storage: S3 settings saved, and the connection test reports the failure", async () => {
  await h.goto(page, "/settings/storage");
  await page.waitForSelector('[data-testid="storage-settings"]');
  await page.click('label:has-text("Use S3 storage")');
  await page.fill('label:has-text("Endpoint") + input', "http://127.0.0.1:9");
  await page.fill('label:has-text("Bucket") + input', "e2e-bucket");
  await page.fill('label:has-text("Region") + input', "us-east-1");
  await page.fill('label:has-text("Access key") + input', "AKIAE2E");
  await page.fill('label:has-text("Secret") + input', "secret-e2e");
  assert.deepEqual(await h.axe(page), [], "storage");
  await page.click('button:has-text("Save changes")');
  await page.waitForSelector('[data-testid="toast"]:has-text("Settings saved")');
  const s = (await h.api("/api/settings")).body;
  assert.equal(s.s3.enabled, true);
  assert.equal(s.s3.bucket, "e2e-bucket");
  await page.click('button:has-text("Test connection")');
  await page.waitForSelector('[data-testid="toast"]:has-text("S3 test failed")', { timeout: 30000 });
  await h.api("/api/settings", { method: "PATCH", body: { s3: { enabled: false } } });
});

test("backups: create, list, download, delete, upload, restore; a cron job runs now", async () => {
  await h.goto(page, "/settings/backups");
  await page.waitForSelector('[data-testid="backups-table"]');
  await page.fill('input[name="backupName"]', "e2e_backup.zip");
  await page.click('[data-testid="create-backup"]');
  await page.waitForSelector('[data-testid="backup-row"]:has-text("e2e_backup.zip")', { timeout: 30000 });
  const list = (await h.api("/api/backups")).body;
  assert.ok(list.some((b) => b.key === "e2e_backup.zip"), JSON.stringify(list));
  assert.deepEqual(await h.axe(page), [], "backups");
  await h.screenshot(page, "backups");
  const [download] = await Promise.all([
    page.waitForEvent("download"),
    page.click('[data-testid="backup-row"]:has-text("e2e_backup.zip") button:has-text("Download")'),
  ]);
  assert.equal(download.suggestedFilename(), "e2e_backup.zip");
  assert.equal(await download.failure(), null);
  await page.click('[data-testid="backup-row"]:has-text("e2e_backup.zip") button:has-text("Delete")');
  await page.click('[data-testid="confirm-yes"]');
  await page.waitForSelector('[data-testid="backup-row"]:has-text("e2e_backup.zip")', { state: "detached" });
  assert.equal((await h.api("/api/backups")).body.length, 0);

  // upload the downloaded zip back, then restore it: a collection made after the backup goes away
  const zip = readFileSync(await download.path());
  await page.setInputFiles('[data-testid="backup-upload"]', { name: "e2e_backup.zip", mimeType: "application/zip", buffer: zip });
  await page.waitForSelector('[data-testid="backup-row"]:has-text("e2e_backup.zip")');
  const made = await h.api("/api/collections", { method: "POST", body: { name: "after_backup", type: "base" } });
  assert.equal(made.status, 200, JSON.stringify(made.body));
  await page.click('[data-testid="backup-row"]:has-text("e2e_backup.zip") button:has-text("Restore")');
  await page.fill("#confirm-typed", "e2e_backup.zip");
  await page.click('[data-testid="confirm-yes"]');
  await page.waitForSelector('[data-testid="toast"]:has-text("Restored e2e_backup.zip")', { timeout: 40000 });
  assert.equal((await h.api("/api/collections/after_backup")).status, 404);
  await page.click('[data-testid="backup-row"]:has-text("e2e_backup.zip") button:has-text("Delete")');
  await page.click('[data-testid="confirm-yes"]');
  await page.waitForSelector('[data-testid="backup-row"]:has-text("e2e_backup.zip")', { state: "detached" });

  await h.goto(page, "/settings/crons");
  await page.waitForSelector('[data-testid="cron-row"]');
  assert.deepEqual(await h.axe(page), [], "crons");
  await page.click('[data-testid="cron-row"]:has-text("__pbLogsCleanup__") button:has-text("Run now")');
  await page.waitForSelector('[data-testid="toast"]:has-text("__pbLogsCleanup__ ran")');
});

test("logs: listed, filtered, with the chart and the detail drawer", async () => {
  for (let i = 0; i < 3; i++) await h.api("/api/collections/users/records?marker=e2e-missing", { guest: true });
  await h.api("/api/no-such-route-e2e", { guest: true });
  // request logs may be written in batches: wait until the server lists it
  const deadline = Date.now() + 10000;
  while ((await h.api(`/api/logs?filter=${encodeURIComponent('data.url ~ "no-such-route-e2e"')}`)).body.totalItems < 1) {
    assert.ok(Date.now() < deadline, "the request was never logged");
    await new Promise((r) => setTimeout(r, 200));
  }
  await h.goto(page, "/logs");
  await page.waitForSelector('[data-testid="log-row"]');
  await page.waitForSelector('[data-testid="logs-chart"]');
  const all = await page.locator('[data-testid="log-row"]').count();
  await page.fill('input[name="filter"]', 'data.url ~ "no-such-route-e2e"');
  await page.click('button:has-text("Apply")');
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll('[data-testid="log-row"]')];
    return rows.length > 0 && rows.every((r) => r.textContent.includes("no-such-route-e2e"));
  });
  assert.ok(all > (await page.locator('[data-testid="log-row"]').count()));
  await page.locator('[data-testid="log-row"]').first().click();
  await page.waitForSelector('[data-testid="log-detail"]');
  assert.match(await page.textContent('[data-testid="log-detail"]'), /no-such-route-e2e/);
  assert.deepEqual(await h.axe(page), [], "logs + drawer");
  await page.keyboard.press("Escape");
  await page.fill('input[name="filter"]', "");
  await page.click('button:has-text("Apply")');
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid="log-row"]').length >= n, all);
  await h.screenshot(page, "logs");
  // a bad filter shows the server's message, not a broken page
  await page.fill('input[name="filter"]', "nosuch ~~ 1");
  await page.click('button:has-text("Apply")');
  await page.waitForSelector('[data-testid="form-error"]');
});

test("export shows the collections JSON", async () => {
  await h.goto(page, "/settings/export");
  await page.waitForSelector('pre[aria-label="Collections JSON"]');
  const json = JSON.parse(await page.textContent('pre[aria-label="Collections JSON"]'));
  assert.ok(json.some((c) => c.name === "users"));
  assert.deepEqual(await h.axe(page), [], "export");
});

test("import adds a collection", async () => {
  const current = (await h.api("/api/collections?perPage=200")).body.items.map(({ created, updated, ...c }) => c);
  const extra = { name: "imported_notes", type: "base", fields: [{ name: "body", type: "text" }] };
  await h.goto(page, "/settings/import");
  await page.fill('textarea[name="importJson"]', JSON.stringify([...current, extra]));
  await page.waitForSelector('[data-testid="import-summary"]:has-text("New: imported_notes")');
  assert.doesNotMatch(await page.textContent('[data-testid="import-summary"]'), /Changed/);
  await page.click('button:has-text("Review and import")');
  await page.waitForSelector('[data-testid="toast"]:has-text("Imported")');
  assert.equal((await h.api("/api/collections/imported_notes")).status, 200);
});
