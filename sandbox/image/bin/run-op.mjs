// One operation of ops.mjs, for when no worker runs (the host's exec fallback):
//
//   node /opt/app/bin/run-op.mjs '{"op":"compile","path":"src/x.workflow.ts",...}'
//
// Prints the same reply a worker would, as one JSON line, and exits.
import { handle, stopThreads } from './ops.mjs';

process.umask(0o002);
let request;
try {
  request = JSON.parse(process.argv[2] ?? '');
} catch {
  request = { op: undefined };
}
const reply = await handle({ id: 1, ...request });
process.stdout.write(JSON.stringify(reply) + '\n');
stopThreads();
process.exit(0);
