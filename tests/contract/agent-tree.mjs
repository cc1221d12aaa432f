// n8n's own agent tree for a message group's events, the reference n8n_bridge/agent_tree.py is
// compared with. Reads {events, normalize?} on stdin (or an array of them, to fold many cases
// in one process) and writes the tree (or the array of trees) as JSON.
//
// The fold is the backend's buildAgentTreeFromEvents (@n8n/instance-ai): a fresh reducer state
// with its default root, every event in order, then the root. `normalize: true` adds the
// normalizeAgentTree the messages route applies before answering.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { createInitialState, reduceEvent, toAgentTree, normalizeAgentTree } =
  require('@n8n/api-types');

function fold({ events, normalize = false }) {
  let state = createInitialState();
  for (const event of events) state = reduceEvent(state, event);
  const tree = toAgentTree(state);
  if (normalize) normalizeAgentTree(tree);
  return tree;
}

let input = '';
for await (const chunk of process.stdin) input += chunk;
const request = JSON.parse(input);
process.stdout.write(JSON.stringify(Array.isArray(request) ? request.map(fold) : fold(request)));
