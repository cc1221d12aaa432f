// The warm-up workflow: what a pool sandbox compiles and runs once before any thread claims
// it, so the compiler (esbuild, the SDK, the node parameter schemas) and the engine (n8n-core,
// the expression evaluator, the Code node's runner) are loaded and their first-call paths
// taken. It touches nothing outside its own process.
import { expr, node, trigger, workflow } from '@n8n/workflow-sdk';

const start = trigger({
  type: 'n8n-nodes-base.manualTrigger',
  version: 1,
  config: { name: 'Start', pinData: [{ amount: 250 }] },
});

const label = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Label',
    parameters: {
      mode: 'manual',
      includeOtherFields: true,
      assignments: {
        assignments: [
          { id: 'large', name: 'isLarge', value: expr('{{ $json.amount > 100 }}'), type: 'boolean' },
        ],
      },
    },
  },
});

const total = node({
  type: 'n8n-nodes-base.code',
  version: 2,
  config: {
    name: 'Total',
    parameters: { jsCode: 'return [{ json: { count: $input.all().length } }];' },
  },
});

export default workflow('warm-up', 'Warm-up').add(start).to(label).to(total);
