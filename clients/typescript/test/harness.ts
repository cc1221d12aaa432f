// The real service for the client's tests: `instance-ai serve` started as a process of its
// own (so a test can restart it), pointed at the Messages API stand-in of the Python suite.
// tests/test_typescript_client.py runs these tests and provides, through the environment:
//   INSTANCE_AI_TEST_BIN        the instance-ai command
//   INSTANCE_AI_TEST_MODEL_URL  the model stand-in (POST /_test/script scripts its turns)
//   INSTANCE_AI_TEST_STATE      a directory for the servers' state
//   INSTANCE_AI_TEST_OWNER      the Docker sandbox owner label (removed by the Python side)
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { createRequire } from 'node:module';

import {
  type ClientOptions,
  InstanceAiClient,
  type StreamedEvent,
  stringifyJsonObject,
} from '../src/index.js';

export const API_KEY = 'ts-client-test-key';

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these tests through pytest (tests/test_typescript_client.py)`);
  return value;
}

async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  server.close();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

export class Served {
  private process?: ChildProcess;
  private output = '';
  readonly address: string;

  private constructor(
    readonly port: number,
    private readonly env: Record<string, string>,
    private readonly clientOptions: Partial<ClientOptions>,
  ) {
    this.address = `127.0.0.1:${port}`;
  }

  /** A server with its own state directory `name`; `env` adds or overrides settings;
   * `clientOptions` are how clients reach it (TLS, say). */
  static async start(
    name: string,
    env: Record<string, string> = {},
    clientOptions: Partial<ClientOptions> = {},
  ): Promise<Served> {
    const state = join(required('INSTANCE_AI_TEST_STATE'), name);
    rmSync(state, { recursive: true, force: true }); // a fresh service, whatever ran before
    mkdirSync(state, { recursive: true });
    const port = await freePort();
    const served = new Served(port, {
      INSTANCE_AI_HOST: '127.0.0.1',
      INSTANCE_AI_PORT: String(port),
      INSTANCE_AI_DATA_DIR: state,
      INSTANCE_AI_MODEL: 'claude-test',
      INSTANCE_AI_ANTHROPIC_API_KEY: 'sk-test-key',
      INSTANCE_AI_ANTHROPIC_BASE_URL: required('INSTANCE_AI_TEST_MODEL_URL'),
      INSTANCE_AI_MODEL_MAX_RETRIES: '1',
      // Builds do not ask the model about their simulation plan (the scripts answer only the
      // conversation's requests; the Python tests cover that pass).
      INSTANCE_AI_SIMULATION_MODEL_PASS: 'false',
      INSTANCE_AI_SANDBOX_PROVIDER: 'docker',
      INSTANCE_AI_SANDBOX_OWNER: required('INSTANCE_AI_TEST_OWNER'),
      INSTANCE_AI_SANDBOX_POOL_SIZE: '0',
      INSTANCE_AI_API_KEYS: API_KEY,
      INSTANCE_AI_LOG_LEVEL: 'warning',
      INSTANCE_AI_SHUTDOWN_GRACE_SECONDS: '2',
      ...env,
    }, clientOptions);
    await served.launch();
    return served;
  }

  client(options: Partial<ClientOptions> = {}): InstanceAiClient {
    return new InstanceAiClient({
      address: this.address,
      apiKey: API_KEY,
      ...this.clientOptions,
      ...options,
    });
  }

  private async launch(): Promise<void> {
    const child = spawn(required('INSTANCE_AI_TEST_BIN'), ['serve'], {
      env: { ...process.env, ...this.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.process = child;
    child.stdout?.on('data', (chunk: Buffer) => (this.output += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (this.output += chunk.toString()));
    await this.ready(child);
  }

  /** Serving once a call gets through (the process may still be migrating or probing).
   * Each try on a new channel: one that failed to connect would wait out its backoff. */
  private async ready(child: ChildProcess): Promise<void> {
    const until = Date.now() + 120_000;
    while (Date.now() < until) {
      if (child.exitCode !== null) {
        throw new Error(`instance-ai serve exited with ${child.exitCode}:\n${this.output}`);
      }
      const probe = this.client({ waitForReady: false });
      try {
        await probe.listTools({ deadlineMs: 2_000 });
        return;
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 200));
      } finally {
        probe.close();
      }
    }
    throw new Error(`instance-ai serve did not answer within 120 s:\n${this.output}`);
  }

  /** SIGTERM (the service drains, followers get UNAVAILABLE), then wait for the exit. */
  async stop(): Promise<void> {
    const child = this.process;
    if (!child || child.exitCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    await exited;
    clearTimeout(timer);
  }

  /** Stop, then serve again on the same port and state. */
  async restart(): Promise<void> {
    await this.stop();
    await this.launch();
  }
}

/** Appends scripted turns to the model stand-in: {text}, {tool, args, text?} or {fault}. */
export async function scriptModel(...turns: object[]): Promise<void> {
  const response = await fetch(`${required('INSTANCE_AI_TEST_MODEL_URL')}/_test/script`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: stringifyJsonObject({ turns }), // bigints as exact digits
  });
  if (!response.ok) throw new Error(`scripting the model failed: ${response.status}`);
}

/** Reads events until one matches, returning all read (the iterator stays open). */
export async function readUntil(
  events: AsyncIterator<StreamedEvent>,
  done: (event: StreamedEvent) => boolean,
  seen: StreamedEvent[] = [],
): Promise<StreamedEvent[]> {
  for (;;) {
    const next = await events.next();
    if (next.done) throw new Error(`the stream ended before the awaited event; read: ${types(seen)}`);
    seen.push(next.value);
    if (done(next.value)) return seen;
  }
}

export function types(events: StreamedEvent[]): string {
  return events.map((e) => e.type).join(', ');
}

// n8n's own event contract, as n8n's editor parses what the service streams.
const require = createRequire(import.meta.url);
const { instanceAiEventSchema } = require('@n8n/api-types') as {
  instanceAiEventSchema: {
    safeParse(value: unknown): { success: boolean; error?: { issues: { path: unknown[]; message: string }[] } };
  };
};

/** The events n8n's `instanceAiEventSchema` refuses, with the schema's messages. */
export function invalidEvents(events: StreamedEvent[]): string[] {
  return events.flatMap((event) => {
    const checked = instanceAiEventSchema.safeParse(event);
    if (checked.success) return [];
    const issues = checked.error?.issues.map((i) => `${i.path.join('.')}: ${i.message}`) ?? [];
    return [`${event.type}: ${issues.join('; ')}`];
  });
}
