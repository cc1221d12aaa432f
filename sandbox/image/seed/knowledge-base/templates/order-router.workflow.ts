// Route orders by size: a manual trigger with sample orders, a Set node that labels each
// order, and an IF that splits large from small ones.
import { expr, ifElse, node, trigger, workflow } from '@n8n/workflow-sdk';

const start = trigger({
  type: 'n8n-nodes-base.manualTrigger',
  version: 1,
  config: {
    name: 'Start',
    pinData: [
      { orderId: 'A-1', amount: 250 },
      { orderId: 'A-2', amount: 40 },
    ],
  },
});

const label = node({
  type: 'n8n-nodes-base.set',
  version: 3.4,
  config: {
    name: 'Label Order',
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

const isLarge = ifElse({
  version: 2.2,
  config: {
    name: 'Is Large?',
    parameters: {
      conditions: {
        options: { caseSensitive: true, leftValue: '', typeValidation: 'strict' },
        combinator: 'and',
        conditions: [
          {
            leftValue: expr('{{ $json.isLarge }}'),
            operator: { type: 'boolean', operation: 'true', singleValue: true },
            rightValue: '',
          },
        ],
      },
    },
  },
});

const large = node({ type: 'n8n-nodes-base.noOp', version: 1, config: { name: 'Large Order' } });
const small = node({ type: 'n8n-nodes-base.noOp', version: 1, config: { name: 'Small Order' } });

export default workflow('order-router', 'Order router')
  .add(start)
  .to(label)
  .to(isLarge)
  .onTrue(large)
  .onFalse(small);
