#!/usr/bin/env node
// Runs the built component in Node (no Ferrobase host needed): jco
// transpiles it to JS + core wasm, stub host imports stand in for the
// ferrobase:plugin interfaces, and every export is called once.
//
//   node test.mjs [component.wasm]   (default: dist/js-hello.wasm)
//
// Node runs the guest with V8's wasm engine and jco's JS glue, so timings
// here say nothing about wasmtime; the value shapes are the same.

import { transpile } from '@bytecodealliance/jco';
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const wasmPath = resolve(process.argv[2] ?? join(here, 'dist/js-hello.wasm'));

const work = await mkdtemp(join(tmpdir(), 'js-hello-test-'));
try {
  const { files } = await transpile(await readFile(wasmPath), {
    name: 'guest',
    instantiation: 'async',
    noTypescript: true,
    quiet: true,
  });
  for (const [name, bytes] of Object.entries(files)) {
    await mkdir(dirname(join(work, name)), { recursive: true });
    await writeFile(join(work, name), bytes);
  }
  const { instantiate } = await import(pathToFileURL(join(work, 'guest.js')).href);

  // ---- stub host ----
  class CallContext {
    constructor(id) { this.id = id; }
    callId() { return BigInt(this.id); }
    auth() { return undefined; }
    method() { return 'GET'; }
    path() { return '/'; }
    header(_name) { return undefined; }
    remoteIp() { return '127.0.0.1'; }
    remainingMs() { return 1000; }
  }
  // An imported function's `err` is thrown with the error value as `payload`.
  class HostError extends Error {
    constructor(payload) { super('host error'); this.payload = payload; }
  }
  const denied = () => { throw new HostError({ tag: 'denied', val: 'not in this test' }); };
  let findRecordsFails = false;
  const calls = [];
  const imports = {
    'ferrobase:plugin/config': { get: () => undefined },
    'ferrobase:plugin/context': { CallContext },
    'ferrobase:plugin/db': {
      query: denied, execute: denied, getRecord: denied,
      createRecord: denied, updateRecord: denied, deleteRecord: denied,
      findRecords(...args) {
        calls.push(['findRecords', ...args]);
        if (findRecordsFails) throw new HostError({ tag: 'denied', val: 'db:read not granted' });
        return [1, 2, 3].map((n) => ({ collection: 'posts', id: `p${n}`, fields: [] }));
      },
    },
    'ferrobase:plugin/http': { fetch: () => { throw 'not in this test'; } },
    'ferrobase:plugin/kv': {
      get: () => undefined, set() {}, delete() {}, increment: () => 0n,
    },
    'ferrobase:plugin/log': { write: (...args) => calls.push(['log', ...args]) },
  };
  const load = async (name) => WebAssembly.compile(await readFile(join(work, name)));
  const guest = await instantiate(load, imports);

  // ---- manifest ----
  assert.deepEqual(guest.manifest.describe(), {
    name: 'js-hello',
    version: '1.0.0',
    hooks: [{ collection: 'posts', events: ['before-create'] }],
    routes: [{ method: 'GET', path: '/api/js-hello/greet/{name}', requireAuth: false }],
    jobs: [],
    wants: ['db:read'],
    extra: [['language', 'javascript']],
  });

  // ---- record hooks ----
  const rec = (fields) => ({ collection: 'posts', id: 'r1', fields });
  const text = (val) => ({ tag: 'text', val });
  const ctx = () => new CallContext(calls.length + 1);

  // err: jco rethrows the guest's error value as `payload`.
  assert.throws(
    () => guest.recordHooks.beforeCreate(ctx(), rec([['title', text('Buy SPAM now')]])),
    (e) => {
      assert.deepEqual(e.payload, {
        status: 400,
        message: 'Failed to create record.',
        fields: [{ field: 'title', code: 'validation_spam', message: 'Spam is not allowed.' }],
      });
      return true;
    },
  );
  const patch = {
    tag: 'patch',
    val: [{ tag: 'set', val: ['note', text('checked by js-hello')] }],
  };
  assert.deepEqual(guest.recordHooks.beforeCreate(ctx(), rec([['title', text('Hi')], ['note', text('')]])), patch);
  assert.deepEqual(guest.recordHooks.beforeCreate(ctx(), rec([['title', text('Hi')], ['note', { tag: 'null' }]])), patch);
  assert.deepEqual(guest.recordHooks.beforeCreate(ctx(), rec([['title', text('Hi')], ['note', text('x')]])), { tag: 'proceed' });
  assert.deepEqual(guest.recordHooks.beforeCreate(ctx(), rec([['title', text('Hi')]])), { tag: 'proceed' });
  assert.deepEqual(guest.recordHooks.beforeUpdate(ctx(), rec([]), rec([])), { tag: 'proceed' });
  assert.equal(guest.recordHooks.beforeDelete(ctx(), rec([])), undefined);
  assert.equal(guest.transactionHooks.inTransaction(ctx(), 'create', rec([])), undefined);
  assert.equal(
    guest.commitEvents.afterCommit([
      { action: 'create', data: rec([]), previous: undefined, actor: undefined, seq: 1n },
    ]),
    undefined,
  );

  // ---- route ----
  const req = {
    method: 'GET',
    path: '/api/js-hello/greet/ada',
    route: '/api/js-hello/greet/{name}',
    params: [['name', 'ada']],
    query: '',
    headers: [],
    body: new Uint8Array(),
  };
  const body = (res) => JSON.parse(new TextDecoder().decode(res.body));
  let res = guest.routes.handle(ctx(), req);
  assert.equal(res.status, 200);
  assert.deepEqual(res.headers, [['content-type', 'application/json']]);
  assert.deepEqual(body(res), { hello: 'ada', lang: 'js', posts: 3 });
  assert.deepEqual(calls.find((c) => c[0] === 'findRecords'), ['findRecords', 'posts', '', [], '', 1000]);
  findRecordsFails = true;
  res = guest.routes.handle(ctx(), req);
  assert.deepEqual(body(res), { hello: 'ada', lang: 'js', posts: -1, error: 'denied: db:read not granted' });

  // ---- jobs ----
  assert.throws(() => guest.jobs.run(ctx(), 'nightly', 0n), (e) => e.payload === 'no jobs');

  console.log('js-hello: all exports behave as expected');
} finally {
  await rm(work, { recursive: true, force: true });
}
