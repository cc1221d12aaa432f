// The in-sandbox worker: one long-lived Node process per sandbox. Requests and replies are JSON
// lines carrying an `id`; many may be in flight.
//
//   -> {"id":1,"op":"ping"}
//   <- {"id":1,"ok":true,"result":"pong"}
//   <- {"id":2,"ok":false,"error":{"code":"escape","message":"..."}}
//
// The operations are in ops.mjs. Two ways to be reached:
//
// - over its stdin and stdout (an exec stream, as Docker runs it): it exits when stdin closes;
// - with `--connect <socket>`, as the sandbox's main process (the runsc engine): it connects
//   out to the host's socket, mounted into the sandbox, and whenever that connection ends it
//   connects again as soon as the host listens there once more. So it holds nothing of the
//   host's between two connections, and a checkpoint taken then restores into any new sandbox
//   whose own socket is at the same path: the restored worker connects to that one.
// Randomness from the kernel at each call (this process may be a restored clone's): first.
import { reseedOpenssl } from './fresh-random-first.mjs';
import { createConnection } from 'node:net';
import { createInterface } from 'node:readline';
import { handle } from './ops.mjs';

process.umask(0o002);

// How often a worker without a connection tries again: quickly at first (a restore, a host
// that is opening the channel), then rarely (an idle sandbox nobody talks to). Counted in
// attempts, not on the clock: a checkpoint taken just after a disconnect restores, however
// much later, into a worker that still tries quickly.
const RETRY_FAST_MS = 20;
const RETRY_SLOW_MS = 250;
const FAST_ATTEMPTS = 250;

function serve(input, write, onClose) {
  const reply = (message) => write(JSON.stringify(message) + '\n');
  const onLine = async (line) => {
    let request;
    try {
      request = JSON.parse(line);
    } catch {
      reply({ id: null, ok: false, error: { code: 'protocol', message: 'not a JSON line' } });
      return;
    }
    reply(await handle(request));
  };
  reply({ id: 0, ok: true, result: { ready: true, pid: process.pid, node: process.version } });
  const lines = createInterface({ input, crlfDelay: Infinity });
  lines.on('line', (line) => {
    if (line.trim()) onLine(line);
  });
  lines.on('close', onClose);
}

function connectLoop(path) {
  let failed = 0;
  const attempt = () => {
    const socket = createConnection(path);
    const retry = () => {
      socket.destroy();
      failed += 1;
      setTimeout(attempt, failed < FAST_ATTEMPTS ? RETRY_FAST_MS : RETRY_SLOW_MS);
    };
    socket.once('error', retry);
    socket.once('connect', () => {
      // A new channel: this worker may have been restored into a clone since the last one, so
      // OpenSSL's generator (which the clone shares with its template) is reseeded first.
      reseedOpenssl();
      // Connected: an error now ends the lines, and their end starts the next attempt.
      socket.off('error', retry);
      socket.on('error', () => {});
      failed = 0;
      serve(socket, (text) => socket.writable && socket.write(text), () => {
        socket.destroy();
        setTimeout(attempt, RETRY_FAST_MS);
      });
    });
  };
  attempt();
}

const connect = process.argv.indexOf('--connect');
if (connect >= 0) {
  // The main process: what the host's channel does never ends it (nor does a signal it
  // could be sent by mistake: only the sandbox's end does).
  process.on('SIGPIPE', () => {});
  connectLoop(process.argv[connect + 1]);
} else {
  serve(process.stdin, (text) => process.stdout.write(text), () => process.exit(0));
}
