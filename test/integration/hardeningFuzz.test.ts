/**
 * A fuzz pass with a fixed seed over every RPC method and every HTTP endpoint of a real daemon:
 * random JSON (deep nesting, odd types, long strings, prototype keys), random media types and
 * encodings. Every answer must be a client error or a success — never an internal error (500,
 * -32603) — and the daemon must be alive and serving at the end. The seed is printed on failure.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import zlib from 'node:zlib';
import { test } from 'node:test';
import { Methods } from '../../trainer-daemon/protocol';
import { RpcClient } from '../../trainer-daemon/protocol/node/connection';
import { startDaemon } from '../helpers/daemon';
import { startScriptedUpstream } from '../helpers/scriptedUpstream';
import { tempDir } from '../helpers/tmp';

const SEED = 20_261_201;

/** mulberry32: small, fast, reproducible. */
function prng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const KEYS = [
  'id',
  'rolloutId',
  'name',
  'value',
  'spans',
  'status',
  'to',
  'model',
  'messages',
  'stream',
  '__proto__',
  'constructor',
  'resourceSpans',
  'limit',
  'cursor',
  'spec',
  'rewardsFile',
  'dataset',
  'config',
  'attributes',
  '',
];

function randomJson(random: () => number, depth = 0): unknown {
  const pick = random();
  if (depth > 4 || pick < 0.3) {
    const leaf = Math.floor(random() * 9);
    return [
      null,
      true,
      -1,
      1e308,
      0.5,
      '',
      'x'.repeat(Math.floor(random() * 300)),
      '/dev/zero',
      'sk-abcdefghijklmnopqrstuvwx',
    ][leaf];
  }
  if (pick < 0.35) return JSON.parse(`${'['.repeat(200)}${']'.repeat(200)}`);
  if (pick < 0.6) return Array.from({ length: Math.floor(random() * 4) }, () => randomJson(random, depth + 1));
  const object: Record<string, unknown> = {};
  for (let i = Math.floor(random() * 5); i > 0; i -= 1)
    object[KEYS[Math.floor(random() * KEYS.length)]!] = randomJson(random, depth + 1);
  return object;
}

function send(url: string, method: string, body: Buffer, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    // An explicit length: a GET's body would otherwise go unframed (Node does not chunk GETs).
    const request = http.request(
      url,
      { method, headers: { ...headers, 'content-length': String(body.length) } },
      (response) => {
        response.resume();
        response.on('end', () => resolve(response.statusCode ?? 0));
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

test(`fuzz (seed ${SEED}): every RPC method and HTTP endpoint answers random input without an internal error`, async (t) => {
  const random = prng(SEED);
  const upstream = await startScriptedUpstream();
  t.after(() => upstream.close());
  const dir = tempDir(t);
  const daemon = await startDaemon(path.join(dir, 'store.db'), ['--upstream', upstream.url]);
  t.after(() => daemon.stop());
  const client = await RpcClient.connect(daemon.ready.url, daemon.ready.token);
  t.after(() => client.dispose());
  const { url } = await client.request('startAgentRun', {});
  const failures: string[] = [];

  // Methods that start long work (training, serving a policy) get random params that fail validation at worst.
  for (const [name, spec] of Object.entries(Methods)) {
    for (let round = 0; round < 6; round += 1) {
      const params = randomJson(random);
      try {
        await client.requestRaw(spec.method, params);
      } catch (error) {
        const code = (error as { code?: number }).code;
        if (code === -32603 || code === undefined)
          failures.push(
            `${name} ${JSON.stringify(params)?.slice(0, 200)}: ${code} ${(error as Error).message.slice(0, 200)}`,
          );
      }
    }
  }

  const key = url.split('/r/')[1]!;
  const endpoints = [
    ['POST', `/r/${key}/v1/chat/completions`],
    ['POST', `/r/${key}/v1/completions`],
    ['POST', `/r/${key}/v1/responses`],
    ['POST', `/r/${key}/v1/embeddings`],
    ['GET', `/r/${key}/v1/models`],
    ['POST', `/r/${key}/v1/traces`],
    ['POST', `/r/${key}/v1/metrics`],
    ['POST', `/r/${key}/reward`],
    ['POST', `/r/${key}/finish`],
    ['GET', `/r/${key}/task`],
    ['GET', `/r/${key}/resources`],
    ['POST', '/v1/traces'],
    ['POST', `/b/${key}/w1/next`],
    ['GET', '/health'],
    ['GET', '/nope'],
  ] as const;
  const types = [
    'application/json',
    'application/x-protobuf',
    'text/plain;charset=json',
    'application/json; charset=utf-8',
    '',
  ];
  for (const [method, target] of endpoints) {
    for (let round = 0; round < 8; round += 1) {
      const json = Buffer.from(JSON.stringify(randomJson(random)) ?? 'null');
      const garbage = Buffer.from(Array.from({ length: Math.floor(random() * 64) }, () => Math.floor(random() * 256)));
      const gzip = random() < 0.25;
      const body = random() < 0.7 ? json : garbage;
      const headers: Record<string, string> = { 'content-type': types[Math.floor(random() * types.length)]! };
      if (gzip) headers['content-encoding'] = 'gzip';
      const status = await send(
        `${daemon.ready.url}${target}`,
        method,
        gzip && random() < 0.5 ? zlib.gzipSync(body) : body,
        headers,
      ).catch((error: Error) => `${error.message}`);
      // 502-504 are the upstream's (a scripted one that refuses odd bodies), never the daemon's own failure.
      if (typeof status === 'string' || (status >= 500 && ![502, 503, 504].includes(status)))
        failures.push(
          `${method} ${target.replace(key, '<key>')} ${headers['content-type']} ${body.toString('utf8').slice(0, 120)}: HTTP ${status}`,
        );
    }
  }

  assert.deepEqual(failures, [], `seed ${SEED}`);
  assert.equal(daemon.process.exitCode, null, 'the daemon is alive');
  assert.ok((await client.request('getStats', {})).schemaVersion > 0, 'and serving');
});
