// Validates events against n8n's event contract: reads a JSON array of events (n8n's shape)
// on stdin, writes a JSON array of the invalid ones: {index, type, issues}.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { instanceAiEventSchema } = require('@n8n/api-types');

let input = '';
for await (const chunk of process.stdin) input += chunk;
const invalid = [];
JSON.parse(input).forEach((event, index) => {
  const checked = instanceAiEventSchema.safeParse(event);
  if (!checked.success) {
    const issues = checked.error.issues.map((i) => `${i.path.join('.') || '(event)'}: ${i.message}`);
    invalid.push({ index, type: event?.type, issues });
  }
});
process.stdout.write(JSON.stringify(invalid));
