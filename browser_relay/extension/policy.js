// Which relay URLs the extension may connect to. A link is only a string a page handed the
// person: anything but the loopback relay or the configured service is refused, so a
// malicious page cannot have the person hand their browser to someone else's server.
import { SERVICE_ORIGINS } from './config.js';

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

export function relayUrlProblem(text, serviceOrigins = SERVICE_ORIGINS) {
  let url;
  try {
    url = new URL(text);
  } catch {
    return 'not a URL: paste the connection link from the setup page';
  }
  if (url.protocol !== 'ws:' && url.protocol !== 'wss:') return 'a connection link starts with ws:// or wss://';
  if (!/^\/extension\/[0-9a-f]{32}$/.test(url.pathname) || !url.searchParams.get('token')) {
    return 'not a connection link of the setup page';
  }
  if (LOOPBACK.has(url.hostname)) return null;
  const origin = `${url.protocol === 'wss:' ? 'https:' : 'http:'}//${url.host}`;
  if (serviceOrigins.includes(origin)) return null;
  return `this extension only connects to this computer or to ${serviceOrigins.join(', ') || 'no other server'}`;
}
