// Two sources merged by position, then totalled in a Code node.
import { merge, node, trigger, workflow } from '@n8n/workflow-sdk';

const start = trigger({ type: 'n8n-nodes-base.manualTrigger', version: 1, config: { name: 'Start' } });
const prices = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: { name: 'Prices', parameters: { mode: 'raw', jsonOutput: '{ "price": 10 }' } },
});
const counts = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: { name: 'Counts', parameters: { mode: 'raw', jsonOutput: '{ "count": 3 }' } },
});
const combine = merge({
  version: 3.2,
  config: { name: 'Combine', parameters: { mode: 'combine', combineBy: 'combineByPosition' } },
});
const total = node({
  type: 'n8n-nodes-base.code',
  version: 2,
  config: {
    name: 'Total',
    parameters: {
      mode: 'runOnceForAllItems',
      jsCode: 'return $input.all().map((item) => ({ json: { total: item.json.price * item.json.count } }));',
    },
  },
});

export default workflow('merge-code', 'Merge and total')
  .add(start)
  .to(prices)
  .to(combine.input(0))
  .add(start)
  .to(counts)
  .to(combine.input(1))
  .add(combine)
  .to(total);
