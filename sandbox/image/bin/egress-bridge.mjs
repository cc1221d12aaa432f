// The sandbox's way out: 127.0.0.1:3128 (what HTTP_PROXY names) forwarded, connection by
// connection, to the service's proxy on the socket mounted at /run/instance-ai. The
// container has no network; the service decides what each request may reach.
import { connect, createServer } from 'node:net';

const SOCKET = '/run/instance-ai/proxy.sock';

createServer((client) => {
  const upstream = connect(SOCKET);
  client.pipe(upstream).pipe(client);
  const end = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('error', end);
  upstream.on('error', end);
}).listen(3128, '127.0.0.1');
