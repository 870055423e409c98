#!/usr/bin/env node
// Delays any Kafka record through ktimer's delay topic: no schema, no ktimer client, headers
// only (docs/delay.md). At its time ktimer produces the record itself (the same key, value and
// headers, plus its ktimer-fire-id, ktimer-due-ms and ktimer-fired-ms headers) to the target
// topic. A tombstone with the timer id cancels it.
//
//   node delay.mjs --brokers 127.0.0.1:19092 send --target orders.close --delay-ms 3000 --id order-42 --value '{"order": 42}'
//   node delay.mjs --brokers 127.0.0.1:19092 cancel order-42
import { parseArgs } from 'node:util';
import { kafka, PRODUCER } from './ktimer_avro.mjs';

const { values: a, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    brokers: { type: 'string', default: '127.0.0.1:9092' },
    'delay-topic': { type: 'string', default: 'ktimer.delay' },
    application: { type: 'string' },
    target: { type: 'string' },
    'delay-ms': { type: 'string' },
    'at-ms': { type: 'string' },
    id: { type: 'string' },
    key: { type: 'string' },
    value: { type: 'string', default: '' },
    header: { type: 'string', multiple: true, default: [] },
  },
});
const [what, cancelId] = positionals;
const headers = {};
let message;
if (what === 'send') {
  if (!a.target || (a['delay-ms'] === undefined) === (a['at-ms'] === undefined)) {
    throw new Error('send needs --target and one of --delay-ms, --at-ms');
  }
  headers['ktimer-target-topic'] = a.target;
  if (a['delay-ms'] !== undefined) headers['ktimer-delay-ms'] = a['delay-ms'];
  else headers['ktimer-at-ms'] = a['at-ms'];
  for (const h of a.header) {
    const [k, ...v] = h.split('=');
    headers[k] = v.join('=');
  }
  if (a.id) headers['ktimer-timer-id'] = a.id;
  message = { key: a.key ?? a.id ?? null, value: Buffer.from(a.value), headers };
} else if (what === 'cancel' && cancelId) {
  headers['ktimer-timer-id'] = cancelId;
  message = { key: a.key ?? cancelId, value: null, headers };
} else {
  throw new Error('usage: delay.mjs [--brokers B] send --target T --delay-ms N [--id ID] | cancel ID');
}
if (a.application) headers['ktimer-application'] = a.application;
const producer = kafka(a.brokers, 'ktimer-node-delay').producer(PRODUCER);
await producer.connect();
const [sent] = await producer.send({ topic: a['delay-topic'], messages: [message] });
await producer.disconnect();
const origin = `${a['delay-topic']}/${sent.partition}/${sent.baseOffset}`;
console.log(`sent ${origin} timer ${a.id ?? cancelId ?? origin}`);
