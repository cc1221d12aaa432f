// Mistakes only the catalog layer sees: an unknown type, an unknown version, a retired
// type, and credentials the node does not take.
import { node, trigger, workflow } from '@n8n/workflow-sdk';
const start = trigger({ type: 'n8n-nodes-base.manualTrigger', version: 1, config: { name: 'Start' } });
const ghost = node({ type: 'n8n-nodes-base.slackk', version: 1, config: { name: 'Ghost' } });
const old = node({ type: 'n8n-nodes-base.set', version: 9, config: { name: 'Old Set' } });
const retired = node({ type: 'n8n-nodes-base.function', version: 1, config: { name: 'Retired', parameters: { functionCode: 'return items;' } } });
const chat = node({
  type: 'n8n-nodes-base.slack', version: 2.3,
  config: { name: 'Chat', parameters: { resource: 'message', operation: 'post', select: 'channel',
    channelId: { __rl: true, mode: 'id', value: 'C1' }, text: 'hi' },
    credentials: { githubApi: { id: '1', name: 'gh' }, notACredential: { id: '2', name: 'x' } } },
});
export default workflow('c', 'Catalog').add(start).to(ghost).to(old).to(retired).to(chat);
