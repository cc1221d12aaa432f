// The service's doors: API keys (missing, wrong, right) and TLS with the service's own CA.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';

import { InstanceAiClient, InstanceAiError, status } from '../src/index.js';
import { Served } from './harness.js';

let served: Served;
const certs = mkdtempSync(join(tmpdir(), 'instance-ai-ts-tls-'));

before(async () => {
  // A self-signed certificate for 127.0.0.1, trusted by the client as its CA.
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1',
    '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
    '-keyout', join(certs, 'key.pem'), '-out', join(certs, 'cert.pem'),
  ], { stdio: 'ignore' });
  served = await Served.start(
    'auth',
    {
      INSTANCE_AI_TLS_CERT_FILE: join(certs, 'cert.pem'),
      INSTANCE_AI_TLS_KEY_FILE: join(certs, 'key.pem'),
    },
    { tls: { rootCerts: readFileSync(join(certs, 'cert.pem')) } },
  );
});

after(async () => {
  await served.stop();
  rmSync(certs, { recursive: true, force: true });
});

function client(options: { apiKey?: string; tls?: boolean }): InstanceAiClient {
  const tls = options.tls === false ? false : { rootCerts: readFileSync(join(certs, 'cert.pem')) };
  return new InstanceAiClient({ address: served.address, apiKey: options.apiKey, tls, deadlineMs: 10_000 });
}

async function failure(call: Promise<unknown>): Promise<InstanceAiError> {
  const error = await call.then(() => undefined, (e: unknown) => e);
  assert.ok(error instanceof InstanceAiError, `expected a failed call, got ${String(error)}`);
  return error;
}

test('over TLS with the right key every call goes through', async () => {
  const trusted = client({ apiKey: 'ts-client-test-key' });
  const tools = await trusted.listTools();
  assert.ok(tools.length > 10);
  trusted.close();
});

test('a missing or wrong key is UNAUTHENTICATED, saying how to send one', async () => {
  for (const apiKey of [undefined, 'wrong-key']) {
    const denied = client({ apiKey });
    const error = await failure(denied.listTools());
    assert.equal(error.code, status.UNAUTHENTICATED);
    assert.match(error.details, /authorization: Bearer/);
    // A stream is refused the same way, and not retried as if the service were away.
    const streamed = await failure(
      (async () => {
        for await (const _ of denied.streamEvents('t1', { follow: false })) void _;
      })(),
    );
    assert.equal(streamed.code, status.UNAUTHENTICATED);
    denied.close();
  }
});

test('plaintext to a TLS service never reaches it', async () => {
  const plain = new InstanceAiClient({
    address: served.address,
    apiKey: 'ts-client-test-key',
    deadlineMs: 2_000,
  });
  const error = await failure(plain.listTools());
  assert.ok([status.UNAVAILABLE, status.DEADLINE_EXCEEDED].includes(error.code), error.message);
  plain.close();
});
