// js-hello: a Ferrobase example plugin written in JavaScript.
//
// Built into a wasm component by componentize-js (see build.mjs) against
// world `ferrobase:plugin/plugin@0.1.3` in plugin-sdk/wit/plugin.wit.
//
// How componentize-js maps the WIT to JS (checked against the bindings it
// generates, see README.md):
//   - each exported interface is a named export, camelCased
//     (`record-hooks` -> `recordHooks`), holding its functions camelCased;
//   - records are objects with camelCased keys; enums are kebab-case
//     strings ("before-create"); variants are `{ tag, val }`;
//   - `result<T, E>`: return T for ok, throw for err: a thrown object's
//     own `payload` property becomes E, a thrown non-Error value (a string)
//     is E itself, and a plain Error without `payload` traps;
//   - `option<T>`: `undefined` (or `null`) for none, the value for some;
//   - `list<u8>`: Uint8Array; u64/s64: BigInt;
//   - `borrow<call-context>`: an object with methods (`ctx.auth()`, ...);
//   - imported functions returning `result` return the ok value and throw
//     the err value wrapped in an Error whose `payload` is the err value.

import { findRecords } from 'ferrobase:plugin/db@0.1.3';
import { write as logWrite } from 'ferrobase:plugin/log@0.1.3';

const NAME = 'js-hello';
const VERSION = '1.0.0';
const NOTE_TEXT = 'checked by js-hello';

// The engine is built without WASI stdio, so console.log goes nowhere:
// log through the host instead.
function log(level, message, fields = []) {
  try {
    logWrite(level, message, fields);
  } catch (_) {
    // logging must never fail a call
  }
}

// Turns anything thrown into a short string.
function errorText(e) {
  if (e && typeof e === 'object' && 'payload' in e) {
    const p = e.payload;
    if (p && typeof p === 'object' && 'tag' in p) {
      // db-error: { tag: 'denied' | 'invalid' | 'other', val: string }
      //           { tag: 'rejected', val: rejection }
      const v = p.val;
      const text = v && typeof v === 'object' ? v.message : String(v);
      return `${p.tag}: ${text}`;
    }
    return String(p);
  }
  return e instanceof Error ? e.message : String(e);
}

function fieldValue(record, name) {
  for (const [key, value] of record.fields) {
    if (key === name) return value;
  }
  return undefined;
}

function isEmptyValue(value) {
  if (value === undefined) return true;
  switch (value.tag) {
    case 'null':
      return true;
    case 'text':
    case 'json':
      return value.val === '' || value.val === 'null' || value.val === '""';
    default:
      return false;
  }
}

const encoder = new TextEncoder();

// A rejection is the `err` case of `result<_, rejection>`: throwing an
// object with a `payload` makes that payload the error value.
class Rejection extends Error {
  constructor(payload) {
    super(payload.message);
    this.payload = payload;
  }
}

// interface `manifest` (named so because the world is `plugin`)
export const manifest = {
  describe() {
    return {
      name: NAME,
      version: VERSION,
      hooks: [{ collection: 'posts', events: ['before-create'] }],
      routes: [
        { method: 'GET', path: '/api/js-hello/greet/{name}', requireAuth: false },
      ],
      jobs: [],
      wants: ['db:read'],
      extra: [['language', 'javascript']],
    };
  },
};

export const recordHooks = {
  beforeCreate(ctx, pending) {
    const title = fieldValue(pending, 'title');
    if (title && title.tag === 'text' && /\bspam\b/i.test(title.val)) {
      log('info', 'rejected a spam post', [
        ['call_id', String(ctx.callId())],
      ]);
      throw new Rejection({
        status: 400,
        message: 'Failed to create record.',
        fields: [
          {
            field: 'title',
            code: 'validation_spam',
            message: 'Spam is not allowed.',
          },
        ],
      });
    }
    const hasNote = pending.fields.some(([key]) => key === 'note');
    if (hasNote && isEmptyValue(fieldValue(pending, 'note'))) {
      return {
        tag: 'patch',
        val: [{ tag: 'set', val: ['note', { tag: 'text', val: NOTE_TEXT }] }],
      };
    }
    return { tag: 'proceed' };
  },

  beforeUpdate(_ctx, _current, _pending) {
    return { tag: 'proceed' };
  },

  beforeDelete(_ctx, _current) {
    // result<_, rejection>: returning normally is ok
  },
};

export const transactionHooks = {
  inTransaction(_ctx, _action, _data) {},
};

export const commitEvents = {
  afterCommit(_changes) {},
};

export const routes = {
  handle(_ctx, req) {
    let name = '';
    for (const [key, value] of req.params) {
      if (key === 'name') name = value;
    }
    const out = { hello: name, lang: 'js', posts: -1 };
    try {
      out.posts = findRecords('posts', '', [], '', 1000).length;
    } catch (e) {
      out.error = errorText(e);
      log('warn', 'findRecords failed', [['error', out.error]]);
    }
    return {
      status: 200,
      headers: [['content-type', 'application/json']],
      body: encoder.encode(JSON.stringify(out)),
    };
  },
};

export const jobs = {
  run(_ctx, _name, _scheduledAtMs) {
    // result<_, string>: a thrown string is the error value
    throw 'no jobs';
  },
};
