import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { start, EMAIL, PASSWORD } from "./harness.mjs";

let h;
before(async () => { h = await start(); });
after(async () => { await h?.stop(); });

// The first-paint goal (under 1 s) is measured here and reported, not asserted: a timing
// depends on the machine's load, and goals are numbers in the note, not pass/fail in the suite.
test("the sign-in page paints, and its first contentful paint is reported", async () => {
  const page = await h.newPage();
  await h.goto(page, "/login");
  await page.waitForSelector('input[name="email"]');
  const fcp = await page.evaluate(() => performance.getEntriesByName("first-contentful-paint")[0]?.startTime);
  assert.ok(typeof fcp === "number", "no paint timing");
  console.log(`first contentful paint: ${fcp.toFixed(0)} ms (goal: under 1000 ms)`);
});

test("sign in: a wrong password shows the server's error, then the right one works", async () => {
  const page = await h.newPage();
  await h.goto(page, "/login");
  await page.fill('input[name="email"]', EMAIL);
  await page.fill('input[name="password"]', "wrong-password");
  await page.click('button[type="submit"]');
  const err = await page.waitForSelector('[data-testid="form-error"]');
  assert.match(await err.textContent(), /authenticate|invalid|failed/i);
  assert.deepEqual(await h.axe(page), []);
  await h.screenshot(page, "login-error");
  await page.fill('input[name="password"]', PASSWORD);
  await page.click('button[type="submit"]');
  await page.waitForSelector('nav[aria-label="Main"]');
  // sign out returns to the login page
  await page.click("text=Sign out");
  await page.waitForSelector("text=Superuser access");
});

test("keyboard only: sign in, move through the sidebar, open and close a dialog", async () => {
  const page = await h.newPage();
  await h.goto(page, "/login");
  await page.waitForSelector('input[name="email"]:focus'); // autofocus
  await page.keyboard.type(EMAIL);
  await page.keyboard.press("Tab");
  await page.keyboard.type(PASSWORD);
  await page.keyboard.press("Enter");
  await page.waitForSelector('nav[aria-label="Main"]');
  await page.focus('nav[aria-label="Main"] a[href="#/logs"]');
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => location.hash === "#/logs");
  await page.focus('nav[aria-label="Main"] a[href="#/collections"]');
  await page.keyboard.press("Enter");
  await page.focus('[data-testid="new-collection"]');
  await page.keyboard.press("Enter");
  await page.waitForSelector('[role="dialog"]');
  // focus moves into the dialog (its first field)
  await page.waitForFunction(() => document.activeElement?.getAttribute("name") === "name", null, { timeout: 10000 });
  for (let i = 0; i < 30; i++) await page.keyboard.press("Tab");
  assert.ok(await page.evaluate(() => !!document.activeElement?.closest('[role="dialog"]')), "focus stays in the dialog");
  await page.keyboard.press("Escape");
  await page.waitForSelector('[role="dialog"]', { state: "detached" });
});

test("an expired or corrupted session goes back to sign-in with a message", async () => {
  const page = await h.newPage();
  await h.signIn(page);
  await page.evaluate(() => {
    const k = "__pb_superuser_auth__";
    const v = JSON.parse(localStorage.getItem(k));
    // a well-formed but wrongly signed token: the server rejects it
    const [a, b] = v.token.split(".");
    v.token = `${a}.${b}.AAAAinvalidsignatureAAAA`;
    localStorage.setItem(k, JSON.stringify(v));
  });
  await page.reload();
  await page.waitForSelector('[data-testid="login-message"]');
  assert.match(await page.textContent('[data-testid="login-message"]'), /sign in again/);
  assert.equal(page.errors.length, 0, page.errors.join("\n"));
});

test("a session revoked mid-use (password changed elsewhere) returns to sign-in", async () => {
  const page = await h.newPage();
  await h.signIn(page);
  await h.goto(page, "/settings");
  await page.waitForSelector('[data-testid="app-settings"]');
  const me = (await h.api(`/api/collections/_superusers/records?filter=${encodeURIComponent(`email="${EMAIL}"`)}`)).body.items[0];
  // the same password again: a new token key all the same, so every issued token is void
  const r = await h.api(`/api/collections/_superusers/records/${me.id}`, { method: "PATCH", body: { password: PASSWORD, passwordConfirm: PASSWORD } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  h._token = null;
  await page.click('nav[aria-label="Main"] a[href="#/logs"]');
  await page.waitForSelector('[data-testid="login-message"]');
  assert.ok(await page.evaluate(() => location.hash === "#/login"));
  assert.deepEqual(page.errors, []);
});

test("with MFA on, sign-in asks for the emailed one-time code", async () => {
  await h.token(); // keep a superuser token from before MFA
  const on = await h.api("/api/collections/_superusers", { method: "PATCH", body: { mfa: { enabled: true }, otp: { enabled: true } } });
  assert.equal(on.status, 200, JSON.stringify(on.body));
  try {
    const page = await h.newPage();
    await h.goto(page, "/login");
    await page.fill('input[name="email"]', EMAIL);
    await page.fill('input[name="password"]', PASSWORD);
    await page.click('button[type="submit"]');
    await page.waitForSelector('input[name="otp"]');
    assert.deepEqual(await h.axe(page), [], "otp step");
    let code;
    const deadline = Date.now() + 10000;
    while (!(code = [...h.stdout.matchAll(/one-time password: (\d+)/g)].pop()?.[1])) {
      assert.ok(Date.now() < deadline, `no OTP mail in the server output:\n${h.stdout.slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    await page.fill('input[name="otp"]', code);
    await page.click('button[type="submit"]');
    await page.waitForSelector('nav[aria-label="Main"]');
  } finally {
    await h.api("/api/collections/_superusers", { method: "PATCH", body: { mfa: { enabled: false }, otp: { enabled: false } } });
  }
});
