// The extension's service worker: one connection to the relay, and chrome.debugger on the tabs
// the person shared (plus the popups those tabs open). Protocol: browser_relay/wire.py.
import { relayUrlProblem } from './policy.js';

const PROTOCOL_VERSION = 1;
const RECONNECT_FOR_MS = 15000;

let socket = null;
let relayUrl = null;
let chosenTab = null;
let userClosed = false;
const attached = new Set();

// -- what the popup (or a test driving this worker) asks ------------------------------------

chrome.runtime.onMessage.addListener((message, _sender, reply) => {
  const work =
    message.type === 'connect' ? connect(message.relayUrl, message.tabId)
    : message.type === 'disconnect' ? disconnect()
    : Promise.resolve();
  work.then(() => reply(status()), (error) => reply({ ...status(), error: String(error.message || error) }));
  return true;
});

export function status() {
  return { connected: socket?.readyState === WebSocket.OPEN, tabs: [...attached], relayUrl };
}

export async function connect(url, tabId) {
  const problem = relayUrlProblem(url);
  if (problem) throw new Error(problem);
  await disconnect();
  relayUrl = url;
  chosenTab = tabId;
  userClosed = false;
  await chrome.storage.session.set({ relayUrl, chosenTab });
  await open();
}

export async function disconnect() {
  userClosed = true;
  socket?.close(1000, 'disconnected by the person');
  socket = null;
  for (const tabId of [...attached]) await detach(tabId);
}

function open(deadline = Date.now() + RECONNECT_FOR_MS) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(`${relayUrl}&v=${PROTOCOL_VERSION}`);
    ws.onopen = () => {
      socket = ws;
      resolve();
    };
    ws.onmessage = (event) => handle(JSON.parse(event.data));
    ws.onclose = () => {
      if (socket === ws) socket = null;
      if (userClosed) return;
      // The relay went away (or this worker restarted): try again for the grace period.
      if (Date.now() < deadline) setTimeout(() => open(deadline).then(resolve, reject), 1000);
      else reject(new Error('could not reach the relay'));
    };
  });
}

function send(message) {
  if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
}

// -- the relay's calls ------------------------------------------------------------------------

async function handle(message) {
  if (message.id === undefined) return; // a notice from the relay (e.g. a refused frame)
  try {
    send({ id: message.id, result: await call(message.method, message.params || {}) });
  } catch (error) {
    send({ id: message.id, error: String(error.message || error) });
  }
}

async function call(method, params) {
  switch (method) {
    case 'attachToTab':
      return attach(params.tabId ?? chosenTab);
    case 'createTab': {
      const tab = await chrome.tabs.create({ url: params.url || 'about:blank', active: false });
      return attach(tab.id);
    }
    case 'closeTab':
      await chrome.tabs.remove(params.tabId);
      return {};
    case 'forwardCDPCommand': {
      const target = params.sessionId ? { tabId: params.tabId, sessionId: params.sessionId } : { tabId: params.tabId };
      // Answered when Chrome answers: events it sent before the answer were forwarded first.
      return chrome.debugger.sendCommand(target, params.method, params.params || {});
    }
    default:
      throw new Error(`unknown method ${method}`);
  }
}

async function attach(tabId) {
  if (tabId === null || tabId === undefined) throw new Error('no tab was chosen in the extension');
  if (!attached.has(tabId)) {
    await chrome.debugger.attach({ tabId }, '1.3');
    attached.add(tabId);
    // Show that the tab is being controlled (Chrome also shows its own debugging bar).
    await chrome.action.setBadgeText({ tabId, text: 'AI' });
    await chrome.action.setBadgeBackgroundColor({ tabId, color: '#3f6fd8' });
  }
  const { targetInfo } = await chrome.debugger.sendCommand({ tabId }, 'Target.getTargetInfo');
  return { tabId, targetInfo };
}

async function detach(tabId) {
  attached.delete(tabId);
  try {
    await chrome.debugger.detach({ tabId });
    await chrome.action.setBadgeText({ tabId, text: '' });
  } catch {
    // Already gone.
  }
}

// -- Chrome's side ------------------------------------------------------------------------------

chrome.debugger.onEvent.addListener((source, method, params) => {
  if (!attached.has(source.tabId)) return;
  const event = { tabId: source.tabId, method, params: params || {} };
  if (source.sessionId) event.sessionId = source.sessionId;
  send({ method: 'forwardCDPEvent', params: event });
});

chrome.debugger.onDetach.addListener((source) => {
  if (!attached.delete(source.tabId)) return;
  send({ method: 'detachedFromTab', params: { tabId: source.tabId } });
});

chrome.tabs.onRemoved.addListener((tabId) => {
  if (attached.delete(tabId)) send({ method: 'detachedFromTab', params: { tabId } });
});

chrome.tabs.onCreated.addListener(async (tab) => {
  // A popup of a shared tab is shared too: the task opened it.
  if (!socket || !attached.has(tab.openerTabId)) return;
  try {
    send({ method: 'attachedTab', params: await attach(tab.id) });
  } catch {
    // A tab the debugger may not attach to (e.g. chrome://): left alone.
  }
});

// A restarted worker picks the connection up again.
chrome.storage.session.get(['relayUrl', 'chosenTab']).then((saved) => {
  if (saved.relayUrl && !socket) {
    relayUrl = saved.relayUrl;
    chosenTab = saved.chosenTab;
    open().catch(() => {});
  }
});

globalThis.instanceAi = { connect, disconnect, status };
