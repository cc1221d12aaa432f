// The in-sandbox worker: one long-lived Node process per sandbox, spoken to over one attached
// exec stream. Requests and replies are JSON lines carrying an `id`; many may be in flight.
//
//   -> {"id":1,"op":"ping"}
//   <- {"id":1,"ok":true,"result":"pong"}
//   <- {"id":2,"ok":false,"error":{"code":"escape","message":"..."}}
//
// The operations are in ops.mjs. The worker exits when its stdin closes.
import { createInterface } from 'node:readline';
import { handle } from './ops.mjs';

process.umask(0o002);

function reply(message) {
  process.stdout.write(JSON.stringify(message) + '\n');
}

async function onLine(line) {
  let request;
  try {
    request = JSON.parse(line);
  } catch {
    reply({ id: null, ok: false, error: { code: 'protocol', message: 'not a JSON line' } });
    return;
  }
  reply(await handle(request));
}

reply({ id: 0, ok: true, result: { ready: true, pid: process.pid, node: process.version } });
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on('line', (line) => {
  if (line.trim()) onLine(line);
});
lines.on('close', () => process.exit(0));
