// Typed node parameters: the TypeScript check catches a value outside the option list.
import { node, trigger, workflow } from '@n8n/workflow-sdk';
import type { HttpRequestV42Node } from '@n8n/node-types/n8n-nodes-base/httpRequest/v42';

const start = trigger({ type: 'n8n-nodes-base.manualTrigger', version: 1, config: { name: 'Start' } });
const fetchOrders = node<HttpRequestV42Node>({
  type: 'n8n-nodes-base.httpRequest',
  version: 4.2,
  config: { name: 'Fetch Orders', parameters: { method: 'FETCH', url: 'https://example.com/orders' } },
});

export default workflow('typed', 'Typed').add(start).to(fetchOrders);
