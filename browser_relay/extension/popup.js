import { relayUrlProblem } from './policy.js';

const state = document.getElementById('state');
const problem = document.getElementById('problem');
const link = document.getElementById('link');

function show(status) {
  state.textContent = status.connected ? `Sharing ${status.tabs.length} tab(s).` : 'Not connected.';
  problem.textContent = status.error || '';
}

document.getElementById('connect').addEventListener('click', async () => {
  const url = link.value.trim();
  const wrong = relayUrlProblem(url);
  if (wrong) {
    problem.textContent = wrong;
    return;
  }
  const [tab] = await chrome.tabs.query({ active: true, currentWindow: true });
  show(await chrome.runtime.sendMessage({ type: 'connect', relayUrl: url, tabId: tab.id }));
});

document.getElementById('disconnect').addEventListener('click', async () => {
  show(await chrome.runtime.sendMessage({ type: 'disconnect' }));
});

chrome.runtime.sendMessage({ type: 'status' }).then(show);
