// One-shot build of a workflow source, usable by the agent from a shell:
//
//   node --import tsx build.mjs src/NAME.workflow.ts [--tidy] [--out FILE]
//
// Prints the WorkflowJSON on stdout (or writes --out) and a JSON report on stderr.
// Exit codes: 0 valid, 1 graph errors, 2 the file did not load, 3 no workflow exported.
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { writeFileSync } from 'node:fs';

const args = process.argv.slice(2);
const valueOf = (flag) => {
  const at = args.indexOf(flag);
  return at >= 0 ? args[at + 1] : undefined;
};
const source = args.find((arg, i) => !arg.startsWith('--') && args[i - 1] !== '--out');
const report = (fields, code) => {
  process.stderr.write(JSON.stringify({ file: source, ...fields }) + '\n');
  process.exit(code);
};

if (!source) report({ ok: false, stage: 'usage', error: 'give a .workflow.ts file' }, 2);

let exported;
try {
  exported = (await import(pathToFileURL(resolve(source)).href)).default;
} catch (error) {
  report({ ok: false, stage: 'load', error: String(error?.message ?? error) }, 2);
}
// A CommonJS-compiled module nests the export once more.
const builder = typeof exported?.validate === 'function' ? exported : exported?.default;
if (typeof builder?.validate !== 'function' || typeof builder?.toJSON !== 'function') {
  report({ ok: false, stage: 'export', error: 'the default export is not a workflow() builder' }, 3);
}

const summary = (issue) => ({ code: issue.code, message: issue.message, nodeName: issue.nodeName });
const graph = builder.validate();
const json = JSON.stringify(builder.toJSON({ tidyUp: args.includes('--tidy') }), null, 2);
const out = valueOf('--out');
if (out) writeFileSync(out, json);
else process.stdout.write(json + '\n');
report(
  { ok: graph.valid, errors: graph.errors.map(summary), warnings: graph.warnings.map(summary) },
  graph.valid ? 0 : 1,
);
