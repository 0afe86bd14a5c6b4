/**
 * The connection slots' rules, on real sockets (server/connectionSlots.ts): a connection that finds no room waits
 * in arrival order; room is made by closing the oldest idle anonymous connection that has sent something, never a
 * keyed one nor one that has sent nothing yet (within its grace); past the parking cap a newcomer is closed.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import { ConnectionSlots } from '../../trainer-daemon/server/connectionSlots';
import { waitFor } from '../helpers/tmp';

interface Bench {
  readonly slots: ConnectionSlots;
  /** Server-side sockets in the order they were admitted. */
  readonly admitted: net.Socket[];
  connect(send?: string): Promise<net.Socket>;
  close(): void;
}

/** A server whose new connections go through the slots, as the daemon's do (paused until admitted). */
async function bench(cap: number, parkCap?: number): Promise<Bench> {
  const admitted: net.Socket[] = [];
  // A grace longer than any test: a connection that has sent nothing is never closed for room here.
  const slots = new ConnectionSlots({ cap, parkCap, parkTimeoutMs: 60_000, silentGraceMs: 60_000 });
  const server = net.createServer({ pauseOnConnect: true }, (socket) =>
    slots.arrive(socket, () => {
      admitted.push(socket);
      socket.resume();
    }),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  const clients: net.Socket[] = [];
  return {
    slots,
    admitted,
    connect: (send) =>
      new Promise((resolve, reject) => {
        const client = net.connect(port, '127.0.0.1', () => {
          if (send) client.write(send);
          resolve(client);
        });
        client.on('error', () => {});
        client.once('error', reject);
        clients.push(client);
      }),
    close: () => {
      slots.close();
      clients.forEach((client) => client.destroy());
      server.close();
    },
  };
}

const closed = (client: net.Socket): Promise<void> =>
  new Promise((resolve) => (client.closed ? resolve() : client.once('close', () => resolve())));

test('a newcomer with no room waits, then takes the slot of the oldest anonymous connection that sent something', async (t) => {
  // cap 8: a reserve of 4, so 4 anonymous connections at once.
  const b = await bench(8);
  t.after(() => b.close());
  const loris = [];
  for (let i = 0; i < 4; i += 1) loris.push(await b.connect('GET / HTTP/1.1\r\nX-Slow: '));
  await waitFor(() => b.admitted.length === 4 && b.admitted.every((s) => s.bytesRead > 0), 'four admitted, read');
  const newcomer = await b.connect();
  await waitFor(() => b.admitted.length === 5, 'the newcomer admitted');
  await closed(loris[0]!);
  assert.equal(b.slots.size, 4);
  assert.equal(b.slots.waiting, 0);
  assert.equal(loris.filter((client) => client.closed).length, 1, 'one connection closed for it: the oldest');
  assert.ok(!newcomer.closed);
});

test('keyed connections and silent newcomers are not closed for room: the next newcomer waits, then past the parking cap is closed', async (t) => {
  const b = await bench(8, 2);
  t.after(() => b.close());
  const keyed = [];
  for (let i = 0; i < 4; i += 1) keyed.push(await b.connect('GET /r/key HTTP/1.1\r\n'));
  await waitFor(() => b.admitted.length === 4, 'four admitted');
  b.admitted.forEach((socket) => b.slots.markKeyed(socket));
  assert.equal(b.slots.keyed, 4);
  // Four anonymous ones that have sent nothing yet: the cap (8) is reached.
  const silent = [];
  for (let i = 0; i < 4; i += 1) silent.push(await b.connect());
  await waitFor(() => b.admitted.length === 8, 'eight admitted');
  const first = await b.connect('GET /health HTTP/1.1\r\n');
  const second = await b.connect('GET /health HTTP/1.1\r\n');
  await waitFor(() => b.slots.waiting === 2, 'two waiting');
  const third = await b.connect();
  await closed(third);
  assert.equal(b.slots.waiting, 2, 'past the parking cap the newcomer is closed at once');
  assert.ok(
    [...keyed, ...silent].every((client) => !client.closed),
    'no keyed or silent connection was closed',
  );
  // A silent connection that now sends something can be closed for room: the waiting ones go in, in order.
  silent[0]!.write('GET / HTTP/1.1\r\n');
  silent[1]!.write('GET / HTTP/1.1\r\n');
  await waitFor(() => b.admitted.length === 10, 'the two waiting admitted');
  await Promise.all([closed(silent[0]!), closed(silent[1]!)]);
  assert.deepEqual(
    b.admitted.slice(8).map((socket) => socket.remotePort),
    [first.localPort, second.localPort],
    'in arrival order',
  );
  assert.ok(keyed.every((client) => !client.closed));
});
