// Randomness read from the sandbox's kernel at each call, in this realm: Math.random and the
// crypto module's random functions (randomBytes, randomFill, randomFillSync, randomInt,
// randomUUID, getRandomValues, and the Web Crypto global's).
//
// Why: a sandbox may be a restore of another's checkpoint (the runsc engine's templates), and
// a restore clones every process with its memory: V8's Math.random state, OpenSSL's random
// generator and Node's cache of UUID bytes would be the template's, so two clones would draw
// the same numbers. The kernel's generator is not in the checkpoint (gVisor's draws from the
// host's at each read), so what is read from /dev/urandom at each call differs between clones.
// Nothing is cached here: a cache filled before a checkpoint would be a clone's too.
//
// A node:vm context has its own Math: `seedMathRandom(context)` gives it a generator of its
// own, seeded from the kernel when the context is made (contexts are made per Code node run).
//
// OpenSSL draws for itself in native code too (a TLS handshake's keys, generateKeyPair), from a
// generator that a restore also clones: `reseedOpenssl()` (reseed.node, built from reseed.c)
// reseeds it from the kernel; the worker calls it whenever a channel opens, which a restored
// worker does before it serves anything.
'use strict';
const fs = require('node:fs');
const crypto = require('node:crypto');
const vm = require('node:vm');
const { syncBuiltinESMExports } = require('node:module');

const MAX_GET_RANDOM_VALUES = 65536;
let urandom = -1;

function fill(view, offset = 0, size) {
  const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  const end = size === undefined ? bytes.length : offset + size;
  if (urandom < 0) urandom = fs.openSync('/dev/urandom', 'r');
  let at = offset;
  while (at < end) at += fs.readSync(urandom, bytes, at, end - at, null);
  return view;
}

function bytes(size) {
  return fill(Buffer.allocUnsafe(size));
}

function random() {
  const word = bytes(8);
  // 53 random bits, as V8's own: [0, 1).
  return (word.readUInt32BE(0) * 2 ** 21 + (word.readUInt32BE(4) >>> 11)) / 2 ** 53;
}

function randomUUID() {
  const id = bytes(16);
  id[6] = (id[6] & 0x0f) | 0x40;
  id[8] = (id[8] & 0x3f) | 0x80;
  const hex = id.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function randomInt(min, max, callback) {
  if (max === undefined || typeof max === 'function') {
    callback = max;
    max = min;
    min = 0;
  }
  if (!Number.isSafeInteger(min) || !Number.isSafeInteger(max) || max <= min || max - min > 2 ** 48) {
    throw new RangeError('randomInt takes safe integers with min < max and a range of at most 2^48');
  }
  const range = max - min;
  const limit = 2 ** 48 - (2 ** 48 % range); // rejection sampling: no modulo bias
  let value;
  do value = bytes(6).readUIntBE(0, 6);
  while (value >= limit);
  const result = min + (value % range);
  if (typeof callback === 'function') {
    process.nextTick(callback, null, result);
    return undefined;
  }
  return result;
}

function getRandomValues(array) {
  if (array.byteLength > MAX_GET_RANDOM_VALUES) {
    throw new DOMException(`The ArrayBufferView's byte length (${array.byteLength}) exceeds 65536`, 'QuotaExceededError');
  }
  return fill(array);
}

// Reseed OpenSSL's generators from the kernel (every thread's follows its primary's). False
// when the module could not be loaded (an image built without it) or the kernel gave nothing.
function reseedOpenssl() {
  return require('./reseed.node').reseed();
}

function install() {
  Math.random = random;
  crypto.randomFillSync = (buffer, offset = 0, size) => fill(buffer, offset, size);
  crypto.randomFill = (buffer, ...rest) => {
    const callback = rest.pop();
    const [offset = 0, size] = rest;
    fill(buffer, offset, size);
    process.nextTick(callback, null, buffer);
  };
  crypto.randomBytes = (size, callback) => {
    const made = bytes(size);
    if (typeof callback !== 'function') return made;
    process.nextTick(callback, null, made);
    return undefined;
  };
  crypto.randomUUID = randomUUID;
  crypto.randomInt = randomInt;
  // The module's getRandomValues is a getter that reads Web Crypto's, replaced here.
  Object.defineProperty(crypto.webcrypto, 'getRandomValues', { value: getRandomValues, writable: true, configurable: true });
  // ES modules that import these by name (`import { randomUUID } from 'node:crypto'`) see
  // the replacements too.
  syncBuiltinESMExports();
}

// sfc32 (a small fast counter generator: 128 bits of state), written into the context so that
// nothing of this realm is reachable from it.
const SEEDED_MATH_RANDOM = `(function (a, b, c, d) {
  Math.random = function random() {
    a |= 0; b |= 0; c |= 0; d |= 0;
    const t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    return (t >>> 0) / 4294967296;
  };
})`;

function seedMathRandom(context) {
  const seed = bytes(16);
  vm.runInContext(SEEDED_MATH_RANDOM, context)(
    seed.readUInt32LE(0), seed.readUInt32LE(4), seed.readUInt32LE(8), seed.readUInt32LE(12),
  );
  return context;
}

module.exports = { install, reseedOpenssl, seedMathRandom };
