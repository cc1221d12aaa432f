// Route tickets by priority into three branches.
import { node, switchCase, trigger, workflow } from '@n8n/workflow-sdk';

const start = trigger({ type: 'n8n-nodes-base.manualTrigger', version: 1, config: { name: 'Start' } });

const options = { caseSensitive: true, leftValue: '', typeValidation: 'strict' };
const high_rule = {
  conditions: {
    options,
    combinator: 'and',
    conditions: [{ leftValue: '={{ $json.priority }}', rightValue: 'high', operator: { type: 'string', operation: 'equals' } }],
  },
};
const normal_rule = {
  conditions: {
    options,
    combinator: 'and',
    conditions: [{ leftValue: '={{ $json.priority }}', rightValue: 'normal', operator: { type: 'string', operation: 'equals' } }],
  },
};
const low_rule = {
  conditions: {
    options,
    combinator: 'and',
    conditions: [{ leftValue: '={{ $json.priority }}', rightValue: 'low', operator: { type: 'string', operation: 'equals' } }],
  },
};

const route = switchCase({
  version: 3.2,
  config: {
    name: 'By Priority',
    parameters: { mode: 'rules', rules: { values: [high_rule, normal_rule, low_rule] } },
  },
});

const high = node({ type: 'n8n-nodes-base.noOp', version: 1, config: { name: 'High' } });
const normal = node({ type: 'n8n-nodes-base.noOp', version: 1, config: { name: 'Normal' } });
const low = node({ type: 'n8n-nodes-base.noOp', version: 1, config: { name: 'Low' } });

export default workflow('switch', 'Ticket router')
  .add(start)
  .to(route)
  .onCase(0, high)
  .onCase(1, normal)
  .onCase(2, low);
